/* Misuse of hbDSP from C: each call prints its name and status; the test holds each to the
 * code the API documents. Nothing here may crash the process. */
#include <stdio.h>
#include <string.h>

#include "hb_dsp.h"
#include "hb_dsp_cv.h"
#include "hb_sys.h"

#define SHOW(name, call) printf("%s %d\n", name, (int)(call))

int main(void) {
  hbSysMem in, out;
  SHOW("alloc_in", hbSysAllocCachedMem(&in, 64 * 48));
  SHOW("alloc_out", hbSysAllocCachedMem(&out, 32 * 24));
  hbDSPImage src = {in, 0, 64, 48, 64, HB_DSP_IMAGE_U8C1};
  hbDSPImage dst = {out, 0, 32, 24, 32, HB_DSP_IMAGE_U8C1};
  hbDSPResizeParam param;
  HB_DSP_INITIALIZE_RESIZE_PARAM(&param);
  hbDSPRpcCtrlParam ctrl;
  HB_DSP_INITIALIZE_RPC_CTRL_PARAM(&ctrl);
  hbDSPTask_t task = NULL;
  SHOW("resize_default_size", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  param.dsizeWidth = 32;
  param.dsizeHeight = 24;
  SHOW("resize_null_task", hbDSPResize(NULL, &src, &dst, &param, &ctrl));
  SHOW("resize_null_param", hbDSPResize(&task, &src, &dst, NULL, &ctrl));
  SHOW("resize_null_ctrl", hbDSPResize(&task, &src, &dst, &param, NULL));
  SHOW("resize_null_src", hbDSPResize(&task, NULL, &dst, &param, &ctrl));
  SHOW("resize_null_dst", hbDSPResize(&task, &src, NULL, &param, &ctrl));
  SHOW("failed_call_left_task", task == NULL);
  param.interpolation = 7;
  SHOW("resize_bad_interpolation", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  param.interpolation = 1;
  ctrl.dspCoreId = 5;
  SHOW("resize_bad_core", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  ctrl.dspCoreId = HB_DSP_CORE_ANY;
  hbDSPImage bent = src;
  bent.mem.virAddr = (char *)bent.mem.virAddr + 16;
  SHOW("resize_bent_pointer", hbDSPResize(&task, &bent, &dst, &param, &ctrl));
  bent = src;
  bent.stride = 10;
  SHOW("resize_short_stride", hbDSPResize(&task, &bent, &dst, &param, &ctrl));
  hbDSPGaussianBlurParam blur;
  HB_DSP_INITIALIZE_GAUSSIAN_BLUR_PARAM(&blur);
  blur.ksizeX = 4;
  hbDSPImage small = src; /* 32 x 24 of the source buffer: dst's size */
  small.width = 32;
  small.height = 24;
  small.stride = 32;
  SHOW("blur_even_kernel", hbDSPGaussianBlur(&task, &small, &dst, &blur, &ctrl));
  blur.ksizeX = 5;
  hbDSPImage big = dst; /* 64 x 48 in dst's 768 B buffer */
  big.width = 64;
  big.height = 48;
  big.stride = 64;
  SHOW("blur_dst_past_its_buffer", hbDSPGaussianBlur(&task, &src, &big, &blur, &ctrl));
  SHOW("resize", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  SHOW("free_in_use", hbSysFreeMem(&in));
  SHOW("wait_bad_handle", hbDSPWaitTaskDone((void *)0x7770, 0));
  SHOW("wait", hbDSPWaitTaskDone(task, 0));
  SHOW("release", hbDSPReleaseTask(task));
  SHOW("release_again", hbDSPReleaseTask(task));
  SHOW("wait_released", hbDSPWaitTaskDone(task, 0));
  SHOW("wait_null_handle", hbDSPWaitTaskDone(NULL, 0));
  SHOW("release_null_handle", hbDSPReleaseTask(NULL));
  SHOW("rpc_no_command", hbDSPRpc(&task, &in, &out, &ctrl));
  ctrl.rpcCmd = 0x7fff;
  SHOW("rpc_unknown_command", hbDSPRpc(&task, &in, &out, &ctrl));
  SHOW("rpc_null_input", hbDSPRpc(&task, NULL, &out, &ctrl));
  hbSysMem stale_out = out;
  SHOW("free_out", hbSysFreeMem(&out));
  SHOW("resize_freed_dest", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  ctrl.rpcCmd = 2083; /* the resize operator's command: the buffers are refused first */
  SHOW("rpc_freed_output", hbDSPRpc(&task, &in, &stale_out, &ctrl));
  ctrl.rpcCmd = HB_DSP_RPC_CMD_NONE;
  SHOW("free_in", hbSysFreeMem(&in));
  SHOW("resize_freed_source", hbDSPResize(&task, &src, &dst, &param, &ctrl));
  SHOW("free_again", hbSysFreeMem(&stale_out));
  SHOW("error_text", hbDSPGetErrorDesc(HB_DSP_TIMEOUT) != NULL ? 0 : 1);
  SHOW("error_text_unknown", hbDSPGetErrorDesc(-1) != NULL ? 0 : 1);
  return 0;
}
