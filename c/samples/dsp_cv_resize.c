/* dsp_cv_resize.c: one call of the DSP's computer-vision library, as the J5 DSP sample's
 * host programs make it (test_resize and its siblings), written for emu's libemu_rt.
 *
 * The picture goes into cached pool memory and the destination is allocated, both
 * described as hbDSPImage. Between the sample's "rpc begin" and "rpc finish" points, whose
 * monotonic-clock interval it prints, the source is cleaned, hbDSPResize is called with
 * its parameter struct and the RPC control struct, waited for, and the destination
 * invalidated (the order of emu's `emu dsp cv`, emu/workloads/dsp_cv.py); then the task is
 * released and the picture written out. Given a kernel size, a second call
 * (hbDSPGaussianBlur) blurs the resized picture the DSP left in memory, in the same
 * window, and the blurred picture is the one written out.
 *
 *   cc dsp_cv_resize.c $(emu cc-flags) -o dsp_cv_resize
 *   ./dsp_cv_resize PICTURE.ppm WIDTH HEIGHT OUT.ppm [INTERPOLATION [BLUR_KSIZE]]
 * INTERPOLATION: 0 nearest, 1 linear (default), 3 area. BLUR_KSIZE: odd, 0 for none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hb_dsp.h"
#include "hb_dsp_cv.h"
#include "hb_sys.h"
#include "sample_image.h"

#define CHECK(call, what)                                                        \
  do {                                                                           \
    int32_t rc_ = (call);                                                        \
    if (rc_ != 0) {                                                              \
      fprintf(stderr, "%s failed: %d %s\n", what, (int)rc_, hbDSPGetErrorDesc(rc_)); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int write_ppm(const char *path, const uint8_t *bgr, int width, int height) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  fprintf(f, "P6\n%d %d\n255\n", width, height);
  for (int i = 0; i < width * height; ++i) {
    const uint8_t rgb[3] = {bgr[3 * i + 2], bgr[3 * i + 1], bgr[3 * i]};
    fwrite(rgb, 1, 3, f);
  }
  return fclose(f);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s PICTURE.ppm WIDTH HEIGHT OUT.ppm [INTERPOLATION [BLUR_KSIZE]]\n",
            argv[0]);
    return 2;
  }
  int width = 0, height = 0;
  uint8_t *bgr = read_ppm_bgr(argv[1], &width, &height);
  if (bgr == NULL) return 2;
  int out_w = atoi(argv[2]), out_h = atoi(argv[3]);
  int blur = argc > 6 ? atoi(argv[6]) : 0;

  hbSysMem src_mem, dst_mem;
  CHECK(hbSysAllocCachedMem(&src_mem, (uint32_t)(width * height * 3)), "hbSysAllocCachedMem");
  memcpy(src_mem.virAddr, bgr, (size_t)width * height * 3);
  free(bgr);
  CHECK(hbSysAllocCachedMem(&dst_mem, (uint32_t)(out_w * out_h * 3)), "hbSysAllocCachedMem");
  hbSysMem blur_mem = dst_mem; /* what is written out: the blurred picture if asked for */
  if (blur > 0) {
    CHECK(hbSysAllocCachedMem(&blur_mem, (uint32_t)(out_w * out_h * 3)), "hbSysAllocCachedMem");
  }

  hbDSPImage src = {src_mem, 0, width, height, width * 3, HB_DSP_IMAGE_U8C3};
  hbDSPImage dst = {dst_mem, 0, out_w, out_h, out_w * 3, HB_DSP_IMAGE_U8C3};
  hbDSPResizeParam param;
  HB_DSP_INITIALIZE_RESIZE_PARAM(&param);
  param.dsizeWidth = out_w;
  param.dsizeHeight = out_h;
  param.interpolation = argc > 5 ? atoi(argv[5]) : 1;
  hbDSPImage blurred = {blur_mem, 0, out_w, out_h, out_w * 3, HB_DSP_IMAGE_U8C3};
  hbDSPGaussianBlurParam blur_param;
  HB_DSP_INITIALIZE_GAUSSIAN_BLUR_PARAM(&blur_param);
  blur_param.ksizeX = blur_param.ksizeY = blur;
  hbDSPRpcCtrlParam ctrl;
  HB_DSP_INITIALIZE_RPC_CTRL_PARAM(&ctrl);

  double begin = now_ms(); /* rpc begin */
  CHECK(hbSysFlushMem(&src_mem, HB_SYS_MEM_CACHE_CLEAN), "hbSysFlushMem");
  hbDSPTask_t task = NULL, blur_task = NULL;
  CHECK(hbDSPResize(&task, &src, &dst, &param, &ctrl), "hbDSPResize");
  CHECK(hbDSPWaitTaskDone(task, 0), "hbDSPWaitTaskDone");
  if (blur > 0) { /* the DSP reads what it wrote: no CPU cache in between */
    CHECK(hbDSPGaussianBlur(&blur_task, &dst, &blurred, &blur_param, &ctrl),
          "hbDSPGaussianBlur");
    CHECK(hbDSPWaitTaskDone(blur_task, 0), "hbDSPWaitTaskDone");
  }
  CHECK(hbSysFlushMem(&blur_mem, HB_SYS_MEM_CACHE_INVALIDATE), "hbSysFlushMem");
  double finish = now_ms(); /* rpc finish */
  CHECK(hbDSPReleaseTask(task), "hbDSPReleaseTask");
  if (blur > 0) CHECK(hbDSPReleaseTask(blur_task), "hbDSPReleaseTask");
  if (write_ppm(argv[4], (const uint8_t *)blur_mem.virAddr, out_w, out_h) != 0) {
    fprintf(stderr, "cannot write %s\n", argv[4]);
    return 1;
  }
  printf("resize %dx%d -> %dx%d%s: rpc %.6f ms (simulated)\n", width, height, out_w, out_h,
         blur > 0 ? " + gaussian blur" : "", finish - begin);
  CHECK(hbSysFreeMem(&src_mem), "hbSysFreeMem");
  CHECK(hbSysFreeMem(&dst_mem), "hbSysFreeMem");
  if (blur > 0) CHECK(hbSysFreeMem(&blur_mem), "hbSysFreeMem");
  return 0;
}
