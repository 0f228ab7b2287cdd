/* dv_conv.c: one 3x3 convolution on DMP's DV700 through the dmp_dv driver, in the style of
 * the driver's tests/test_conv, written for emu's libemu_rt: the context, device memory
 * for the input, output and packed weights (mapped, written between sync_start and
 * sync_end), the input in the device's WHC8 order, a version-0 conv command with one run,
 * a command list committed, executed and waited for, the output read back.
 *
 *   cc dv_conv.c $(emu cc-flags) -o dv_conv && ./dv_conv OUT.bin [SEED]
 * Writes the output (FP16, channel-major C x H x W) to OUT.bin and prints the driver's
 * execution time. Input and weights are k / 64 for small pseudo-random k, exact in FP16.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dmp_dv.h"

#define C 16 /* input channels */
#define M 16 /* output channels */
#define H 16
#define W 16
#define K 3

static uint32_t state;
static uint16_t half_of(int k) { /* k / 64 as FP16 bits, |k| <= 64 */
  _Float16 v = (_Float16)((float)k / 64.0f);
  uint16_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}
static int next_k(void) {
  state = state * 1664525u + 1013904223u;
  return (int)(state >> 24) % 65 - 32;
}

#define FAIL(what)                                                               \
  do {                                                                           \
    fprintf(stderr, "%s failed: %s\n", what, dmp_dv_get_last_error_message());   \
    return 1;                                                                    \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s OUT.bin [SEED]\n", argv[0]);
    return 2;
  }
  state = argc > 2 ? (uint32_t)atoi(argv[2]) : 1u;
  static uint16_t input[C * H * W], weights[M * C * K * K], bias[M];
  for (int i = 0; i < C * H * W; ++i) input[i] = half_of(next_k());
  for (int i = 0; i < M * C * K * K; ++i) weights[i] = half_of(next_k() / 4);
  for (int i = 0; i < M; ++i) bias[i] = half_of(next_k());

  dmp_dv_context ctx = dmp_dv_context_create();
  if (ctx == NULL) FAIL("dmp_dv_context_create");
  size_t packed_size = 0;
  if (dmp_dv_pack_conv_weights(C, K, K, M, NULL, weights, bias, NULL, NULL, &packed_size))
    FAIL("dmp_dv_pack_conv_weights (size)");
  dmp_dv_mem in_mem = dmp_dv_mem_alloc(ctx, 2 * C * H * W);
  dmp_dv_mem out_mem = dmp_dv_mem_alloc(ctx, 2 * M * H * W);
  dmp_dv_mem w_mem = dmp_dv_mem_alloc(ctx, packed_size);
  if (in_mem == NULL || out_mem == NULL || w_mem == NULL) FAIL("dmp_dv_mem_alloc");

  uint8_t *w_map = dmp_dv_mem_map(w_mem);
  if (w_map == NULL || dmp_dv_mem_sync_start(w_mem, 0, 1)) FAIL("weights map/sync_start");
  size_t given = packed_size;
  if (dmp_dv_pack_conv_weights(C, K, K, M, NULL, weights, bias, NULL, w_map, &given))
    FAIL("dmp_dv_pack_conv_weights");
  if (dmp_dv_mem_sync_end(w_mem)) FAIL("weights sync_end");

  uint16_t *in_map = (uint16_t *)dmp_dv_mem_map(in_mem);
  if (in_map == NULL || dmp_dv_mem_sync_start(in_mem, 0, 1)) FAIL("input map/sync_start");
  for (int c = 0; c < C; ++c) /* WHC8: blocks of 8 channels, x outermost, then y */
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        int b = c / 8, n = C - 8 * b < 8 ? C - 8 * b : 8;
        in_map[8 * b * H * W + (x * H + y) * n + (c - 8 * b)] = input[(c * H + y) * W + x];
      }
  if (dmp_dv_mem_sync_end(in_mem)) FAIL("input sync_end");

  dmp_dv_cmdraw_conv_v0 cmd;
  memset(&cmd, 0, sizeof cmd);
  cmd.header.size = sizeof cmd;
  cmd.header.device_type = DMP_DV_DEV_CONV;
  cmd.header.version = 0;
  cmd.input_buf.mem = in_mem;
  cmd.output_buf.mem = out_mem;
  cmd.topo = 1;
  cmd.w = W;
  cmd.h = H;
  cmd.z = 1;
  cmd.c = C;
  cmd.run[0].weight_buf.mem = w_mem;
  cmd.run[0].conv_pad = 1 | 1 << 8 | 1 << 16 | 1 << 24;
  cmd.run[0].m = M;
  cmd.run[0].conv_enable = 1;
  cmd.run[0].p = K | K << 8;
  cmd.run[0].pz = 1;
  cmd.run[0].conv_stride = 1 | 1 << 8;
  cmd.run[0].conv_dilation = 0;
  cmd.run[0].weight_fmt = 1;

  dmp_dv_cmdlist list = dmp_dv_cmdlist_create(ctx);
  if (list == NULL) FAIL("dmp_dv_cmdlist_create");
  if (dmp_dv_cmdlist_add_raw(list, (dmp_dv_cmdraw *)&cmd)) FAIL("dmp_dv_cmdlist_add_raw");
  if (dmp_dv_cmdlist_commit(list)) FAIL("dmp_dv_cmdlist_commit");
  int64_t exec_id = dmp_dv_cmdlist_exec(list);
  if (exec_id < 0) FAIL("dmp_dv_cmdlist_exec");
  if (dmp_dv_cmdlist_wait(list, exec_id)) FAIL("dmp_dv_cmdlist_wait");
  printf("conv %dx%dx%d -> %d, %dx%d kernel: %lld us on the device\n", C, H, W, M, K, K,
         (long long)dmp_dv_cmdlist_get_last_exec_time(list));

  uint16_t *out_map = (uint16_t *)dmp_dv_mem_map(out_mem);
  if (out_map == NULL || dmp_dv_mem_sync_start(out_mem, 1, 0)) FAIL("output map/sync_start");
  static uint16_t output[M * H * W];
  for (int c = 0; c < M; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        int b = c / 8, n = M - 8 * b < 8 ? M - 8 * b : 8;
        output[(c * H + y) * W + x] = out_map[8 * b * H * W + (x * H + y) * n + (c - 8 * b)];
      }
  dmp_dv_mem_sync_end(out_mem);
  FILE *f = fopen(argv[1], "wb");
  if (f == NULL || fwrite(output, sizeof output, 1, f) != 1 || fclose(f)) {
    fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }
  dmp_dv_cmdlist_release(list);
  dmp_dv_mem_release(w_mem);
  dmp_dv_mem_release(out_mem);
  dmp_dv_mem_release(in_mem);
  dmp_dv_context_release(ctx);
  return 0;
}
