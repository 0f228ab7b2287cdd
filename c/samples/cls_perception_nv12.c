/* cls_perception_nv12.c: an NV12 image classifier in the style of the OE quick-start
 * samples, written for emu's libemu_rt and unchanged from what would build for the board
 * (apart from reading the picture without OpenCV: sample_image.h).
 *
 * perception_init loads the model file and takes its first model; prepare_tensor asks each
 * tensor's properties, allocates alignedByteSize bytes of cached memory for it and (inputs)
 * sets alignedShape = validShape, so the runtime pads the NV12 rows; the picture becomes
 * NV12 in the input buffer; perception_process cleans the input, infers on BPU core 0 and
 * waits; the top k of the output's scores, dequantised by SHIFT or SCALE when the output
 * has one, are printed with the inference's latency from the monotonic clock.
 *
 *   cc cls_perception_nv12.c $(emu cc-flags) -o cls_perception_nv12
 *   ./cls_perception_nv12 MODEL.hbm PICTURE.ppm [TOP_K]
 * The picture must have the model's input size (emu dsp cv resize makes one).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hb_dnn.h"
#include "hb_sys.h"
#include "sample_image.h"
#include "sample_topk.h"

#define CHECK(call, what)                                      \
  do {                                                         \
    int32_t rc_ = (call);                                      \
    if (rc_ != 0) {                                            \
      fprintf(stderr, "%s failed: %s\n", what, hbDNNGetErrorDesc(rc_)); \
      return rc_;                                              \
    }                                                          \
  } while (0)

typedef struct {
  hbPackedDNNHandle_t packed_dnn_handle;
  hbDNNHandle_t dnn_handle;
  hbDNNTaskHandle_t task_handle;
  int32_t input_count;
  int32_t output_count;
  hbDNNTensor *input_tensors;
  hbDNNTensor *output_tensors;
  int32_t model_height;
  int32_t model_width;
} ClsPerception;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int prepare_tensor(ClsPerception *p) {
  for (int i = 0; i < p->input_count; ++i) {
    hbDNNTensor *tensor = &p->input_tensors[i];
    CHECK(hbDNNGetInputTensorProperties(&tensor->properties, p->dnn_handle, i),
          "hbDNNGetInputTensorProperties");
    p->model_height = tensor->properties.validShape.dimensionSize[2];
    p->model_width = tensor->properties.validShape.dimensionSize[3];
    CHECK(hbSysAllocCachedMem(&tensor->sysMem[0], tensor->properties.alignedByteSize),
          "hbSysAllocCachedMem");
    tensor->properties.alignedShape = tensor->properties.validShape;
  }
  for (int i = 0; i < p->output_count; ++i) {
    hbDNNTensor *tensor = &p->output_tensors[i];
    CHECK(hbDNNGetOutputTensorProperties(&tensor->properties, p->dnn_handle, i),
          "hbDNNGetOutputTensorProperties");
    CHECK(hbSysAllocCachedMem(&tensor->sysMem[0], tensor->properties.alignedByteSize),
          "hbSysAllocCachedMem");
  }
  return 0;
}

static int perception_init(ClsPerception *p, const char *model_file) {
  CHECK(hbDNNInitializeFromFiles(&p->packed_dnn_handle, &model_file, 1),
        "hbDNNInitializeFromFiles");
  const char **model_names;
  int32_t model_count = 0;
  CHECK(hbDNNGetModelNameList(&model_names, &model_count, p->packed_dnn_handle),
        "hbDNNGetModelNameList");
  CHECK(hbDNNGetModelHandle(&p->dnn_handle, p->packed_dnn_handle, model_names[0]),
        "hbDNNGetModelHandle");
  printf("DNN runtime version: %s\n", hbDNNGetVersion());
  CHECK(hbDNNGetInputCount(&p->input_count, p->dnn_handle), "hbDNNGetInputCount");
  CHECK(hbDNNGetOutputCount(&p->output_count, p->dnn_handle), "hbDNNGetOutputCount");
  p->input_tensors = (hbDNNTensor *)calloc(p->input_count, sizeof(hbDNNTensor));
  p->output_tensors = (hbDNNTensor *)calloc(p->output_count, sizeof(hbDNNTensor));
  return prepare_tensor(p);
}

static int perception_process(ClsPerception *p, double *latency_ms) {
  for (int j = 0; j < p->input_count; ++j)
    CHECK(hbSysFlushMem(&p->input_tensors[j].sysMem[0], HB_SYS_MEM_CACHE_CLEAN),
          "hbSysFlushMem");
  hbDNNInferCtrlParam infer_ctrl_param;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&infer_ctrl_param);
  infer_ctrl_param.bpuCoreId = HB_BPU_CORE_0;
  hbDNNTensor *output = p->output_tensors;
  p->task_handle = NULL;
  double start = now_ms();
  CHECK(hbDNNInfer(&p->task_handle, &output, p->input_tensors, p->dnn_handle,
                   &infer_ctrl_param), "hbDNNInfer");
  CHECK(hbDNNWaitTaskDone(p->task_handle, 0), "hbDNNWaitTaskDone");
  *latency_ms = now_ms() - start;
  return 0;
}

/* The k best scores of output 0 in descending order (k <= 64). */
static int get_topk_result(hbDNNTensor *tensor, int top_k, Classification *top) {
  CHECK(hbSysFlushMem(&tensor->sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE), "hbSysFlushMem");
  const int32_t *shape = tensor->properties.validShape.dimensionSize;
  const float *data = (const float *)tensor->sysMem[0].virAddr;
  int tensor_len = shape[0] * shape[1] * shape[2] * shape[3];
  int kept = 0;
  for (int i = 0; i < tensor_len; ++i) {
    double score = data[i];
    if (tensor->properties.quantiType == SHIFT)
      score = data[i] / (double)(1 << tensor->properties.shift.shiftData[i]);
    else if (tensor->properties.quantiType == SCALE)
      score = (double)data[i] * tensor->properties.scale.scaleData[i];
    topk_insert(top, &kept, top_k, i, score);
  }
  return 0;
}

static int perception_release(ClsPerception *p) {
  CHECK(hbDNNReleaseTask(p->task_handle), "hbDNNReleaseTask");
  for (int i = 0; i < p->input_count; ++i)
    CHECK(hbSysFreeMem(&p->input_tensors[i].sysMem[0]), "hbSysFreeMem");
  for (int i = 0; i < p->output_count; ++i)
    CHECK(hbSysFreeMem(&p->output_tensors[i].sysMem[0]), "hbSysFreeMem");
  free(p->input_tensors);
  free(p->output_tensors);
  CHECK(hbDNNRelease(p->packed_dnn_handle), "hbDNNRelease");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.hbm PICTURE.ppm [TOP_K]\n", argv[0]);
    return 2;
  }
  int top_k = argc > 3 ? atoi(argv[3]) : 5;
  if (top_k < 1 || top_k > 64) {
    fprintf(stderr, "TOP_K must be 1 to 64\n");
    return 2;
  }
  ClsPerception p;
  memset(&p, 0, sizeof p);
  int rc = perception_init(&p, argv[1]);
  if (rc != 0) return 1;

  int width = 0, height = 0;
  uint8_t *bgr = read_ppm_bgr(argv[2], &width, &height);
  if (bgr == NULL) return 2;
  if (width != p.model_width || height != p.model_height || width % 2 || height % 2) {
    fprintf(stderr, "%s is %dx%d; the model takes %dx%d (even sizes)\n", argv[2], width,
            height, p.model_width, p.model_height);
    return 2;
  }
  bgr_to_nv12(bgr, width, height, (uint8_t *)p.input_tensors[0].sysMem[0].virAddr);
  free(bgr);

  double latency_ms = 0;
  if (perception_process(&p, &latency_ms) != 0) return 1;
  for (int i = 0; i < p.output_count; ++i)
    if (hbSysFlushMem(&p.output_tensors[i].sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE) != 0)
      return 1;
  Classification top[64];
  if (get_topk_result(&p.output_tensors[0], top_k, top) != 0) return 1;
  for (int i = 0; i < top_k; ++i)
    printf("TOP %d result id: %d score %f\n", i, top[i].id, top[i].score);
  printf("inference latency: %.6f ms (simulated)\n", latency_ms);
  return perception_release(&p) == 0 ? 0 : 1;
}
