/* multi_thread_cls.c: worker threads classify their own streams of frames at the same time,
 * each with one of the packed models, at its own task priority, in the style of the OE
 * samples; written for emu's libemu_rt and unchanged from what would build for the board
 * (apart from reading pictures without OpenCV: sample_image.h).
 *
 * main loads the comma-separated model files, takes a model handle per worker by name,
 * fills a WorkerArg per worker, starts each with pthread_create and joins them in order,
 * then prints what each frame gave and how long its inference took (monotonic clock).
 * A worker prepares its input tensor (input 0's properties, alignedShape = validShape,
 * cached memory for one NV12 frame) and its output tensors, and per frame converts the
 * picture to NV12 into the input, cleans it, infers at its priority, waits, releases the
 * task and keeps the top k of its scores (int32 codes, or floats, dequantised).
 *
 *   cc multi_thread_cls.c $(emu cc-flags) -o multi_thread_cls
 *   ./multi_thread_cls --model_file=A.hbm,B.hbm --worker NAME:PRIORITY:PIC.ppm[,PIC.ppm...]
 *                      [--worker ...] [--top_k K]
 * Pictures must have the model's input size.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hb_dnn.h"
#include "hb_sys.h"
#include "sample_image.h"
#include "sample_topk.h"

#define MAX_WORKERS 64
#define MAX_FRAMES 64
#define MAX_TOP_K 16

#define CHECK(call, what)                                              \
  do {                                                                 \
    int32_t rc_ = (call);                                              \
    if (rc_ != 0) {                                                    \
      fprintf(stderr, "%s failed, error code:%d\n", what, (int)rc_);   \
      return rc_;                                                      \
    }                                                                  \
  } while (0)

typedef struct {
  char name[32];
  hbDNNHandle_t dnn_handle;
  const char *pictures[MAX_FRAMES];
  int frame_count;
  int priority;
  int bpu_core_id;
  int top_k;
  Classification results[MAX_FRAMES][MAX_TOP_K];
  double latency_ms[MAX_FRAMES];
  int ret;
} WorkerArg;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int prepare_tensor(hbDNNTensor *output, hbDNNHandle_t dnn_handle, int output_count) {
  for (int i = 0; i < output_count; ++i) {
    CHECK(hbDNNGetOutputTensorProperties(&output[i].properties, dnn_handle, i),
          "hbDNNGetOutputTensorProperties");
    CHECK(hbSysAllocCachedMem(&output[i].sysMem[0], output[i].properties.alignedByteSize),
          "hbSysAllocCachedMem");
  }
  return 0;
}

/* The top k scores over dimensions 1-3, best first; of equal scores the later class first. */
static int get_topk_result(hbDNNTensor *tensor, int top_k, Classification *top) {
  CHECK(hbSysFlushMem(&tensor->sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE), "hbSysFlushMem");
  hbDNNTensorProperties *props = &tensor->properties;
  const int32_t *shape = props->validShape.dimensionSize;
  int count = shape[1] * shape[2] * shape[3];
  int kept = 0;
  for (int i = 0; i < count; ++i) {
    double value = props->tensorType == HB_DNN_TENSOR_TYPE_F32
                       ? ((const float *)tensor->sysMem[0].virAddr)[i]
                       : ((const int32_t *)tensor->sysMem[0].virAddr)[i];
    double score = value;
    if (props->quantiType == SHIFT)
      score = value / (double)(1 << props->shift.shiftData[i]);
    else if (props->quantiType == SCALE)
      score = value * props->scale.scaleData[i];
    topk_insert(top, &kept, top_k, i, score);
  }
  return 0;
}

static int classify_frames(WorkerArg *arg) {
  hbDNNTensor input_tensor;
  memset(&input_tensor, 0, sizeof input_tensor);
  CHECK(hbDNNGetInputTensorProperties(&input_tensor.properties, arg->dnn_handle, 0),
        "hbDNNGetInputTensorProperties");
  input_tensor.properties.alignedShape = input_tensor.properties.validShape;
  int model_h = input_tensor.properties.validShape.dimensionSize[2];
  int model_w = input_tensor.properties.validShape.dimensionSize[3];
  int yuv_length = model_h * model_w * 3 / 2;
  CHECK(hbSysAllocCachedMem(&input_tensor.sysMem[0], yuv_length), "hbSysAllocCachedMem");
  int32_t output_count = 0;
  CHECK(hbDNNGetOutputCount(&output_count, arg->dnn_handle), "hbDNNGetOutputCount");
  hbDNNTensor *output_tensors = (hbDNNTensor *)calloc(output_count, sizeof(hbDNNTensor));
  int rc = prepare_tensor(output_tensors, arg->dnn_handle, output_count);
  if (rc != 0) return rc;
  uint8_t *nv12 = (uint8_t *)malloc(yuv_length);

  for (int f = 0; f < arg->frame_count; ++f) {
    int w = 0, h = 0;
    uint8_t *bgr = read_ppm_bgr(arg->pictures[f], &w, &h);
    if (bgr == NULL || w != model_w || h != model_h || w % 2 || h % 2) {
      fprintf(stderr, "%s: not a %dx%d picture\n", arg->pictures[f], model_w, model_h);
      free(bgr);
      return -1;
    }
    bgr_to_nv12(bgr, w, h, nv12);
    free(bgr);
    memcpy(input_tensor.sysMem[0].virAddr, nv12, yuv_length);
    CHECK(hbSysFlushMem(&input_tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN), "hbSysFlushMem");
    hbDNNInferCtrlParam infer_ctrl_param;
    HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&infer_ctrl_param);
    infer_ctrl_param.priority = arg->priority;
    infer_ctrl_param.bpuCoreId = arg->bpu_core_id;
    hbDNNTaskHandle_t task_handle = NULL;
    hbDNNTensor *output = output_tensors;
    double start_ms = now_ms();
    CHECK(hbDNNInfer(&task_handle, &output, &input_tensor, arg->dnn_handle,
                     &infer_ctrl_param), "hbDNNInfer");
    CHECK(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone");
    arg->latency_ms[f] = now_ms() - start_ms;
    CHECK(hbDNNReleaseTask(task_handle), "hbDNNReleaseTask");
    rc = get_topk_result(&output_tensors[0], arg->top_k, arg->results[f]);
    if (rc != 0) return rc;
  }
  free(nv12);
  CHECK(hbSysFreeMem(&input_tensor.sysMem[0]), "hbSysFreeMem");
  for (int i = 0; i < output_count; ++i)
    CHECK(hbSysFreeMem(&output_tensors[i].sysMem[0]), "hbSysFreeMem");
  free(output_tensors);
  return 0;
}

static void *infer_worker(void *raw) {
  WorkerArg *arg = (WorkerArg *)raw;
  arg->ret = classify_frames(arg);
  return NULL;
}

int main(int argc, char **argv) {
  const char *model_file = NULL;
  static WorkerArg args[MAX_WORKERS];
  static char specs[MAX_WORKERS][4096];
  int workers = 0, top_k = 1;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "--model_file=", 13) == 0) {
      model_file = argv[i] + 13;
    } else if (strcmp(argv[i], "--top_k") == 0 && i + 1 < argc) {
      top_k = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc && workers < MAX_WORKERS) {
      snprintf(specs[workers++], sizeof specs[0], "%s", argv[++i]);
    } else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (model_file == NULL || workers == 0 || top_k < 1 || top_k > MAX_TOP_K) {
    fprintf(stderr, "usage: %s --model_file=A.hbm[,B.hbm] --worker NAME:PRIORITY:PIC[,PIC]"
                    " [--worker ...] [--top_k K]\n", argv[0]);
    return 2;
  }

  char files_text[4096];
  snprintf(files_text, sizeof files_text, "%s", model_file);
  const char *model_file_names[16];
  int model_count = 0;
  for (char *save = NULL, *part = strtok_r(files_text, ",", &save); part && model_count < 16;
       part = strtok_r(NULL, ",", &save))
    model_file_names[model_count++] = part;
  hbPackedDNNHandle_t packed_dnn_handle = NULL;
  CHECK(hbDNNInitializeFromFiles(&packed_dnn_handle, model_file_names, model_count),
        "hbDNNInitializeFromFiles");
  const char **model_name_list = NULL;
  int32_t name_count = 0;
  CHECK(hbDNNGetModelNameList(&model_name_list, &name_count, packed_dnn_handle),
        "hbDNNGetModelNameList");

  for (int k = 0; k < workers; ++k) {
    WorkerArg *arg = &args[k];
    char *save = NULL;
    char *model_name = strtok_r(specs[k], ":", &save);
    char *priority = strtok_r(NULL, ":", &save);
    char *pictures = strtok_r(NULL, "", &save);
    if (model_name == NULL || priority == NULL || pictures == NULL) {
      fprintf(stderr, "--worker takes NAME:PRIORITY:PICTURES\n");
      return 2;
    }
    CHECK(hbDNNGetModelHandle(&arg->dnn_handle, packed_dnn_handle, model_name),
          "hbDNNGetModelHandle");
    snprintf(arg->name, sizeof arg->name, "worker%d", k);
    arg->priority = atoi(priority);
    arg->bpu_core_id = HB_BPU_CORE_ANY;
    arg->top_k = top_k;
    for (char *s2 = NULL, *p = strtok_r(pictures, ",", &s2); p && arg->frame_count < MAX_FRAMES;
         p = strtok_r(NULL, ",", &s2))
      arg->pictures[arg->frame_count++] = p;
  }

  pthread_t threads[MAX_WORKERS];
  double start_ms = now_ms();
  for (int k = 0; k < workers; ++k)
    if (pthread_create(&threads[k], NULL, infer_worker, &args[k]) != 0) return 1;
  for (int k = 0; k < workers; ++k) pthread_join(threads[k], NULL);
  double elapsed_ms = now_ms() - start_ms;

  for (int k = 0; k < workers; ++k) {
    WorkerArg *arg = &args[k];
    if (arg->ret != 0) {
      fprintf(stderr, "%s failed, error code:%d\n", arg->name, arg->ret);
      return arg->ret;
    }
    for (int f = 0; f < arg->frame_count; ++f)
      printf("%s frame %d: class %d score %.6f, %.3f ms\n", arg->name, f,
             arg->results[f][0].id, arg->results[f][0].score, arg->latency_ms[f]);
  }
  printf("all workers done in %.3f ms\n", elapsed_ms);
  CHECK(hbDNNRelease(packed_dnn_handle), "hbDNNRelease");
  return 0;
}
