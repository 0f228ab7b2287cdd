/* Misuse of the runtime APIs from C: every call prints its name and status; the test holds
 * each status to the code the API documents. Nothing here may crash the process. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu_rt.h"
#include "hb_dnn.h"
#include "hb_sys.h"

#define SHOW(name, call) printf("%s %d\n", name, (int)(call))

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *model = argv[1], *garbage = argv[2];
  hbSysMem mem, copy, bent;
  memset(&mem, 0, sizeof mem);
  SHOW("alloc_null", hbSysAllocMem(NULL, 64));
  SHOW("alloc_zero", hbSysAllocMem(&mem, 0));
  SHOW("alloc", hbSysAllocCachedMem(&mem, 4096));
  bent = mem;
  bent.virAddr = (char *)mem.virAddr + 1;
  SHOW("flush_bent_pointer", hbSysFlushMem(&bent, HB_SYS_MEM_CACHE_CLEAN));
  bent = mem;
  bent.memSize = 64;
  SHOW("flush_wrong_size", hbSysFlushMem(&bent, HB_SYS_MEM_CACHE_CLEAN));
  SHOW("flush_bad_flag", hbSysFlushMem(&mem, 7));
  SHOW("flush_null", hbSysFlushMem(NULL, HB_SYS_MEM_CACHE_CLEAN));
  SHOW("write_null_source", hbSysWriteMem(&mem, NULL, 16));
  char bytes[16] = "0123456789abcde";
  SHOW("write_too_long", hbSysWriteMem(&mem, bytes, 8192));
  SHOW("write", hbSysWriteMem(&mem, bytes, 16));
  char back[16] = {0};
  SHOW("read", hbSysReadMem(back, &mem, 16));
  SHOW("read_equal", memcmp(back, bytes, 16));
  copy = mem;
  SHOW("free", hbSysFreeMem(&mem));
  SHOW("free_again", hbSysFreeMem(&mem));
  SHOW("flush_freed_copy", hbSysFlushMem(&copy, HB_SYS_MEM_CACHE_CLEAN));
  SHOW("unregister_allocated", (hbSysAllocMem(&mem, 64), hbSysUnregisterMem(&mem)));
  SHOW("free_allocated", hbSysFreeMem(&mem));

  hbPackedDNNHandle_t packed = NULL;
  const char *names[1] = {NULL};
  SHOW("init_null_handle", hbDNNInitializeFromFiles(NULL, &model, 1));
  SHOW("init_null_name", hbDNNInitializeFromFiles(&packed, names, 1));
  SHOW("init_zero_files", hbDNNInitializeFromFiles(&packed, &model, 0));
  const char *missing = "/nonexistent/model.hbm";
  SHOW("init_missing_file", hbDNNInitializeFromFiles(&packed, &missing, 1));
  SHOW("init_garbage_file", hbDNNInitializeFromFiles(&packed, &garbage, 1));
  hbDNNHandle_t dnn = NULL;
  SHOW("model_handle_bad_packed", hbDNNGetModelHandle(&dnn, (void *)0x1230, "x"));
  int32_t count = 0;
  SHOW("input_count_bad_handle", hbDNNGetInputCount(&count, (void *)0xdead0));
  SHOW("wait_bad_task", hbDNNWaitTaskDone((void *)0x990, 0));
  SHOW("release_null_task", hbDNNReleaseTask(NULL));
  SHOW("release_null_packed", hbDNNRelease(NULL));

  SHOW("init", hbDNNInitializeFromFiles(&packed, &model, 1));
  const char **model_names = NULL;
  SHOW("names", hbDNNGetModelNameList(&model_names, &count, packed));
  SHOW("model_handle_null_name", hbDNNGetModelHandle(&dnn, packed, NULL));
  SHOW("model_handle_unknown_name", hbDNNGetModelHandle(&dnn, packed, "no such model"));
  SHOW("model_handle", hbDNNGetModelHandle(&dnn, packed, model_names[0]));
  SHOW("input_count_null_out", hbDNNGetInputCount(NULL, dnn));
  hbDNNTensorProperties props;
  SHOW("properties_bad_index", hbDNNGetInputTensorProperties(&props, dnn, 7));
  SHOW("properties_null", hbDNNGetInputTensorProperties(NULL, dnn, 0));

  hbDNNTensor input, output;
  memset(&input, 0, sizeof input);
  memset(&output, 0, sizeof output);
  SHOW("input_properties", hbDNNGetInputTensorProperties(&input.properties, dnn, 0));
  SHOW("output_properties", hbDNNGetOutputTensorProperties(&output.properties, dnn, 0));
  SHOW("input_alloc", hbSysAllocCachedMem(&input.sysMem[0], input.properties.alignedByteSize));
  SHOW("output_alloc", hbSysAllocCachedMem(&output.sysMem[0],
                                           output.properties.alignedByteSize));
  hbDNNInferCtrlParam ctrl;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  hbDNNTaskHandle_t task = NULL;
  hbDNNTensor *out = &output;
  SHOW("infer_null_ctrl", hbDNNInfer(&task, &out, &input, dnn, NULL));
  SHOW("infer_null_output", hbDNNInfer(&task, NULL, &input, dnn, &ctrl));
  SHOW("infer_bad_model", hbDNNInfer(&task, &out, &input, (void *)0x5550, &ctrl));
  ctrl.bpuCoreId = 9;
  SHOW("infer_bad_core", hbDNNInfer(&task, &out, &input, dnn, &ctrl));
  ctrl.bpuCoreId = HB_BPU_CORE_ANY;
  ctrl.priority = 300;
  SHOW("infer_bad_priority", hbDNNInfer(&task, &out, &input, dnn, &ctrl));
  ctrl.priority = HB_DNN_PRIORITY_LOWEST;
  hbDNNTensor stale = input;
  stale.sysMem[0].phyAddr += 4096;
  SHOW("infer_foreign_memory", hbDNNInfer(&task, &out, &stale, dnn, &ctrl));
  SHOW("infer", hbDNNInfer(&task, &out, &input, dnn, &ctrl));
  SHOW("free_memory_in_use", hbSysFreeMem(&input.sysMem[0]));
  SHOW("release_packed_running", hbDNNRelease(packed));
  SHOW("wait_bad_timeout_ok", hbDNNWaitTaskDone(task, -5));
  SHOW("release_task", hbDNNReleaseTask(task));
  SHOW("release_task_again", hbDNNReleaseTask(task));
  SHOW("wait_released_task", hbDNNWaitTaskDone(task, 0));
  SHOW("free_input", hbSysFreeMem(&input.sysMem[0]));
  task = NULL;
  SHOW("infer_freed_input", hbDNNInfer(&task, &out, &input, dnn, &ctrl));
  SHOW("free_output", hbSysFreeMem(&output.sysMem[0]));
  SHOW("release_packed", hbDNNRelease(packed));
  SHOW("release_packed_again", hbDNNRelease(packed));
  SHOW("model_handle_released", hbDNNGetModelHandle(&dnn, packed, model_names[0]));
  SHOW("input_count_released", hbDNNGetInputCount(&count, dnn));
  SHOW("error_text", hbDNNGetErrorDesc(HB_DNN_INVALID_ARGUMENT) != NULL ? 0 : 1);
  SHOW("cpu_work", emuCpuWork(1000));
  SHOW("now_positive", emuNowPs() > 0 ? 0 : 1);
  return 0;
}
