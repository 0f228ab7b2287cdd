/* Misuse of dmp_dv from C: each line names a call and what it returned; the test holds each
 * to the driver's documented answer. Nothing here may crash the process. */
#include <stdio.h>
#include <string.h>

#include "dmp_dv.h"

#define SHOW(name, call) printf("%s %d\n", name, (int)(call))
#define SHOW_PTR(name, call) printf("%s %s\n", name, (call) == NULL ? "null" : "pointer")

int main(void) {
  dmp_dv_context bad = (dmp_dv_context)(uintptr_t)0x4440;
  dmp_dv_context ctx = dmp_dv_context_create();
  SHOW("context_null_info", dmp_dv_context_get_info(ctx, NULL));
  dmp_dv_info_v0 info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  SHOW("info_bad_context", dmp_dv_context_get_info(bad, (dmp_dv_info *)&info));
  SHOW("exists_bad_context", dmp_dv_fpga_device_exists(bad, DMP_DV_DEV_CONV));
  SHOW_PTR("alloc_bad_context", dmp_dv_mem_alloc(bad, 64));
  SHOW_PTR("map_bad_mem", dmp_dv_mem_map((dmp_dv_mem)(uintptr_t)0x5550));
  SHOW("sync_bad_mem", dmp_dv_mem_sync_start(NULL, 0, 1));
  SHOW("size_bad_mem", dmp_dv_mem_get_size(NULL));
  SHOW_PTR("cmdlist_bad_context", dmp_dv_cmdlist_create(bad));
  dmp_dv_cmdlist list = dmp_dv_cmdlist_create(ctx);
  SHOW("add_null_cmd", dmp_dv_cmdlist_add_raw(list, NULL));
  dmp_dv_cmdraw_conv_v0 cmd;
  memset(&cmd, 0, sizeof cmd);
  cmd.header.size = sizeof cmd;
  cmd.header.device_type = DMP_DV_DEV_CONV;
  cmd.header.version = 9;
  SHOW("add_bad_version", dmp_dv_cmdlist_add_raw(list, (dmp_dv_cmdraw *)&cmd));
  cmd.header.version = 0;
  cmd.header.size = 8;
  SHOW("add_short_command", dmp_dv_cmdlist_add_raw(list, (dmp_dv_cmdraw *)&cmd));
  cmd.header.size = sizeof cmd;
  cmd.input_buf.mem = (dmp_dv_mem)(uintptr_t)0x6660;
  cmd.w = cmd.h = cmd.z = 1;
  cmd.c = 8;
  cmd.run[0].m = 8;
  cmd.run[0].conv_enable = 1;
  cmd.run[0].p = 1 | 1 << 8;
  SHOW("add_unknown_memory", dmp_dv_cmdlist_add_raw(list, (dmp_dv_cmdraw *)&cmd));
  SHOW("commit_empty", dmp_dv_cmdlist_commit(list));
  printf("exec_bad_list %s\n", dmp_dv_cmdlist_exec(NULL) < 0 ? "negative" : "not");
  SHOW("wait_bad_id", dmp_dv_cmdlist_wait(list, 12345));
  size_t size = 0;
  uint16_t bias[1] = {0};
  SHOW("pack_zero_dims", dmp_dv_pack_conv_weights(0, 3, 3, 1, NULL, bias, bias, NULL, NULL, &size));
  SHOW("pack_null_size", dmp_dv_pack_conv_weights(1, 3, 3, 1, NULL, bias, bias, NULL, NULL, NULL));
  dmp_dv_mem mem = dmp_dv_mem_alloc(ctx, 64);
  dmp_dv_mem_release(mem);
  SHOW_PTR("released_mem_map", dmp_dv_mem_map(mem));
  SHOW("released_mem_sync", dmp_dv_mem_sync_start(mem, 1, 0));
  dmp_dv_mem_release(mem);
  printf("double_release ok\n");
  SHOW("released_mem_size", dmp_dv_mem_get_size(mem));
  dmp_dv_mem_unmap(mem);
  dmp_dv_mem_retain(mem);
  printf("released_mem_unmap_retain ok\n");
  uint8_t small[4];
  size = sizeof small;
  uint16_t weights[9] = {0};
  SHOW("pack_small_buffer", dmp_dv_pack_conv_weights(1, 3, 3, 1, NULL, weights, bias, NULL, small, &size));
  size = 4096;
  static uint8_t big[4096];
  SHOW("pack_null_weights", dmp_dv_pack_conv_weights(1, 3, 3, 1, NULL, NULL, bias, NULL, big, &size));
  printf("exec_uncommitted %s\n", dmp_dv_cmdlist_exec(list) < 0 ? "negative" : "not");
  dmp_dv_cmdlist gone = dmp_dv_cmdlist_create(ctx);
  dmp_dv_cmdlist_release(gone);
  SHOW("released_list_commit", dmp_dv_cmdlist_commit(gone));
  dmp_dv_cmdlist_release(gone);
  dmp_dv_context ctx2 = dmp_dv_context_create();
  dmp_dv_context_release(ctx2);
  SHOW_PTR("released_context_alloc", dmp_dv_mem_alloc(ctx2, 64));
  SHOW_PTR("released_context_list", dmp_dv_cmdlist_create(ctx2));
  SHOW_PTR("null_context_alloc", dmp_dv_mem_alloc(NULL, 64));
  SHOW("null_context_exists", dmp_dv_fpga_device_exists(NULL, DMP_DV_DEV_CONV));
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  SHOW("info", dmp_dv_context_get_info(ctx, (dmp_dv_info *)&info));
  printf("info_conv_freq %s\n", info.conv_freq > 0 ? "positive" : "zero");
  printf("last_error %s\n", strlen(dmp_dv_get_last_error_message()) > 0 ? "set" : "empty");
  dmp_dv_cmdlist_release(list);
  dmp_dv_context_release(ctx);
  return 0;
}
