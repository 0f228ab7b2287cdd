/* hb_dnn.h: the board's neural-network runtime API (hbDNN), for programs built against
 * emu's libemu_rt. Names, types and signatures follow the public J5 runtime documentation.
 * Not here: plugin layers (hbDNNRegisterLayerCreator), whose layers are C++ classes.
 */
#ifndef EMU_HB_DNN_H_
#define EMU_HB_DNN_H_

#include <stdint.h>

#include "hb_dnn_status.h"
#include "hb_sys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HB_DNN_VERSION_MAJOR 1U
#define HB_DNN_VERSION_MINOR 1U
#define HB_DNN_VERSION_PATCH 0U

#define HB_DNN_TENSOR_MAX_DIMENSIONS 8

/* Defaults of an inference's control: any core, lowest priority, not chained. */
#define HB_DNN_INITIALIZE_INFER_CTRL_PARAM(param) \
  {                                               \
    (param)->bpuCoreId = HB_BPU_CORE_ANY;         \
    (param)->dspCoreId = HB_DSP_CORE_ANY;         \
    (param)->priority = HB_DNN_PRIORITY_LOWEST;   \
    (param)->more = 0;                            \
    (param)->customId = 0;                        \
    (param)->reserved1 = 0;                       \
    (param)->reserved2 = 0;                       \
  }

/* Defaults of a resize's control: any core, lowest priority, bilinear. */
#define HB_DNN_INITIALIZE_RESIZE_CTRL_PARAM(param)  \
  {                                                 \
    (param)->bpuCoreId = HB_BPU_CORE_ANY;           \
    (param)->resizeType = HB_DNN_RESIZE_TYPE_BILINEAR; \
    (param)->priority = HB_DNN_PRIORITY_LOWEST;     \
    (param)->reserved1 = 0;                         \
    (param)->reserved2 = 0;                         \
    (param)->reserved3 = 0;                         \
    (param)->reserved4 = 0;                         \
  }

typedef void *hbPackedDNNHandle_t; /* the models of one or more model files */
typedef void *hbDNNHandle_t;       /* one model */
typedef void *hbDNNTaskHandle_t;   /* one task */

typedef enum {
  HB_DNN_LAYOUT_NHWC = 0,
  HB_DNN_LAYOUT_NCHW = 2,
  HB_DNN_LAYOUT_NONE = 255
} hbDNNTensorLayout;

typedef enum {
  HB_DNN_IMG_TYPE_Y,
  HB_DNN_IMG_TYPE_NV12,
  HB_DNN_IMG_TYPE_NV12_SEPARATE,
  HB_DNN_IMG_TYPE_YUV444,
  HB_DNN_IMG_TYPE_RGB,
  HB_DNN_IMG_TYPE_BGR,
  HB_DNN_TENSOR_TYPE_S4,
  HB_DNN_TENSOR_TYPE_U4,
  HB_DNN_TENSOR_TYPE_S8,
  HB_DNN_TENSOR_TYPE_U8,
  HB_DNN_TENSOR_TYPE_F16,
  HB_DNN_TENSOR_TYPE_S16,
  HB_DNN_TENSOR_TYPE_U16,
  HB_DNN_TENSOR_TYPE_F32,
  HB_DNN_TENSOR_TYPE_S32,
  HB_DNN_TENSOR_TYPE_U32,
  HB_DNN_TENSOR_TYPE_F64,
  HB_DNN_TENSOR_TYPE_S64,
  HB_DNN_TENSOR_TYPE_U64,
  HB_DNN_TENSOR_TYPE_MAX
} hbDNNDataType;

typedef struct {
  int32_t dimensionSize[HB_DNN_TENSOR_MAX_DIMENSIONS];
  int32_t numDimensions;
} hbDNNTensorShape;

/* value = code / (1 << shiftData[i]) */
typedef struct {
  int32_t shiftLen;
  uint8_t *shiftData;
} hbDNNQuantiShift;

/* value = (code - zeroPointData[i]) * scaleData[i] */
typedef struct {
  int32_t scaleLen;
  float *scaleData;
  int32_t zeroPointLen;
  int8_t *zeroPointData;
} hbDNNQuantiScale;

typedef enum {
  NONE,
  SHIFT,
  SCALE
} hbDNNQuantiType;

typedef struct {
  hbDNNTensorShape validShape;
  hbDNNTensorShape alignedShape;
  int32_t tensorLayout;
  int32_t tensorType;
  hbDNNQuantiShift shift;
  hbDNNQuantiScale scale;
  hbDNNQuantiType quantiType;
  int32_t quantizeAxis;
  int32_t alignedByteSize;
  int32_t stride[HB_DNN_TENSOR_MAX_DIMENSIONS];
} hbDNNTensorProperties;

typedef enum {
  HB_DNN_PRIORITY_LOWEST = 0,
  HB_DNN_PRIORITY_HIGHEST = 255,
  HB_DNN_PRIORITY_PREEMP = 255
} hbDNNTaskPriority;

typedef struct {
  hbSysMem sysMem[4];
  hbDNNTensorProperties properties;
} hbDNNTensor;

/* A region of interest; right and bottom are inclusive. */
typedef struct {
  int32_t left;
  int32_t top;
  int32_t right;
  int32_t bottom;
} hbDNNRoi;

typedef struct {
  int32_t bpuCoreId;
  int32_t dspCoreId;
  int32_t priority;
  int32_t more;
  int64_t customId;
  int32_t reserved1;
  int32_t reserved2;
} hbDNNInferCtrlParam;

typedef enum {
  HB_DNN_RESIZE_TYPE_BILINEAR = 0
} hbDNNResizeType;

typedef struct {
  int32_t bpuCoreId;
  int32_t priority;
  hbDNNResizeType resizeType;
  int32_t reserved1;
  int32_t reserved2;
  int32_t reserved3;
  int32_t reserved4;
} hbDNNResizeCtrlParam;

/* Called on the runtime's callback thread when a task completes. */
typedef void (*hbDNNTaskDoneCb)(hbDNNTaskHandle_t taskHandle, int32_t status, void *userdata);

const char *hbDNNGetVersion(void);

int32_t hbDNNInitializeFromFiles(hbPackedDNNHandle_t *packedDNNHandle,
                                 const char **modelFileNames, int32_t modelFileCount);
int32_t hbDNNInitializeFromDDR(hbPackedDNNHandle_t *packedDNNHandle, const void **modelData,
                               int32_t *modelDataLengths, int32_t modelDataCount);
int32_t hbDNNRelease(hbPackedDNNHandle_t packedDNNHandle);

int32_t hbDNNGetModelNameList(const char ***modelNameList, int32_t *modelNameCount,
                              hbPackedDNNHandle_t packedDNNHandle);
int32_t hbDNNGetModelHandle(hbDNNHandle_t *dnnHandle, hbPackedDNNHandle_t packedDNNHandle,
                            const char *modelName);
int32_t hbDNNGetInputCount(int32_t *inputCount, hbDNNHandle_t dnnHandle);
int32_t hbDNNGetInputName(const char **name, hbDNNHandle_t dnnHandle, int32_t inputIndex);
int32_t hbDNNGetInputTensorProperties(hbDNNTensorProperties *properties,
                                      hbDNNHandle_t dnnHandle, int32_t inputIndex);
int32_t hbDNNGetOutputCount(int32_t *outputCount, hbDNNHandle_t dnnHandle);
int32_t hbDNNGetOutputName(const char **name, hbDNNHandle_t dnnHandle, int32_t outputIndex);
int32_t hbDNNGetOutputTensorProperties(hbDNNTensorProperties *properties,
                                       hbDNNHandle_t dnnHandle, int32_t outputIndex);

int32_t hbDNNInfer(hbDNNTaskHandle_t *taskHandle, hbDNNTensor **output,
                   const hbDNNTensor *input, hbDNNHandle_t dnnHandle,
                   hbDNNInferCtrlParam *inferCtrlParam);
int32_t hbDNNRoiInfer(hbDNNTaskHandle_t *taskHandle, hbDNNTensor **output,
                      const hbDNNTensor *input, hbDNNRoi *rois, int32_t roiCount,
                      hbDNNHandle_t dnnHandle, hbDNNInferCtrlParam *inferCtrlParam);
int32_t hbDNNResize(hbDNNTaskHandle_t *taskHandle, hbDNNTensor *output,
                    const hbDNNTensor *input, const hbDNNRoi *roi,
                    hbDNNResizeCtrlParam *resizeCtrlParam);
int32_t hbDNNWaitTaskDone(hbDNNTaskHandle_t taskHandle, int32_t timeout);
int32_t hbDNNReleaseTask(hbDNNTaskHandle_t taskHandle);
int32_t hbDNNSetTaskDoneCb(hbDNNTaskHandle_t taskHandle, hbDNNTaskDoneCb cb, void *userdata);

const char *hbDNNGetErrorDesc(int32_t errorCode);

#ifdef __cplusplus
}
#endif

#endif /* EMU_HB_DNN_H_ */
