/* hb_dsp.h: the ARM side of the vDSP RPC (hbDSP), for programs built against emu's
 * libemu_rt. The seeds name the API (hbDSPRpc, hbDSPWaitTaskDone, hbDSPReleaseTask, the
 * control struct) but not its C signatures: these follow hbDNN's conventions (the task
 * handle as the first, out-parameter; timeouts in ms, <= 0 waiting until done). The status
 * values are emu's (emu.runtime.hbdsp), checked against it by emu's tests.
 */
#ifndef EMU_HB_DSP_H_
#define EMU_HB_DSP_H_

#include <stdint.h>

#include "hb_sys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HB_DSP_SUCCESS 0
#define HB_DSP_INVALID_ARGUMENT -6200001
#define HB_DSP_INVALID_TASK_HANDLE -6200002
#define HB_DSP_UNKNOWN_COMMAND -6200003
#define HB_DSP_CORE_OFFLINE -6200004
#define HB_DSP_TIMEOUT -6200005
#define HB_DSP_TASK_FAILED -6200006
#define HB_DSP_TASK_RUNNING -6200007
#define HB_DSP_WRONG_THREAD -6200008
#define HB_DSP_DEADLOCK -6200009

/* What the initialiser leaves in rpcCmd: no operator has it, so a forgotten command fails
 * with HB_DSP_UNKNOWN_COMMAND. */
#define HB_DSP_RPC_CMD_NONE -1

typedef enum {
  HB_DSP_RPC_PRIORITY_LOWEST = 0,
  HB_DSP_RPC_PRIORITY_HIGHEST = 255,
  HB_DSP_RPC_PRIORITY_PREEMP = 255
} hbDSPRpcPriority;

typedef void *hbDSPTask_t; /* one RPC task */

typedef struct {
  int32_t dspCoreId; /* HB_DSP_CORE_ANY, HB_DSP_CORE_0 or HB_DSP_CORE_1 */
  int32_t rpcCmd;    /* the operator's command id */
  int32_t priority;  /* 0-255; 255 preempts at tile boundaries */
  int64_t customId;  /* the second-level priority: smaller first */
  int32_t reserved1;
  int32_t reserved2;
} hbDSPRpcCtrlParam;

#define HB_DSP_INITIALIZE_RPC_CTRL_PARAM(param)      \
  {                                                  \
    (param)->dspCoreId = HB_DSP_CORE_ANY;            \
    (param)->rpcCmd = HB_DSP_RPC_CMD_NONE;           \
    (param)->priority = HB_DSP_RPC_PRIORITY_LOWEST;  \
    (param)->customId = 0;                           \
    (param)->reserved1 = 0;                          \
    (param)->reserved2 = 0;                          \
  }

/* Queue operator rpcCmd on input -> output (pool buffers, pinned until the task is done). */
int32_t hbDSPRpc(hbDSPTask_t *taskHandle, hbSysMem *input, hbSysMem *output,
                 hbDSPRpcCtrlParam *rpcCtrlParam);
int32_t hbDSPWaitTaskDone(hbDSPTask_t taskHandle, int32_t timeout);
int32_t hbDSPReleaseTask(hbDSPTask_t taskHandle);
const char *hbDSPGetErrorDesc(int32_t errorCode);

#ifdef __cplusplus
}
#endif

#endif /* EMU_HB_DSP_H_ */
