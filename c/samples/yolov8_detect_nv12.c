/* yolov8_detect_nv12.c: a YOLOv8 detector on an NV12 model, in the style of the RDK model
 * zoo's YOLOv8-Detect_YUV420SP sample, written for emu's libemu_rt and unchanged from what
 * would build for the board (apart from reading the picture without OpenCV, sample_image.h,
 * and its own non-maximum suppression in place of cv::dnn::NMSBoxes).
 *
 * It loads the model, checks its one input (NV12, NCHW, 4-D) and six outputs and finds
 * which is which by its valid shape (per stride 8, 16, 32: an NHWC map of 80 class logits,
 * and one of 4 x 16 box-distribution codes); converts the picture to NV12 into cached
 * memory and cleans it; infers and waits; then per stride, with the class map float
 * (quantiType NONE) and the box map int32 codes with a scale per channel (SCALE), keeps
 * each cell whose best logit reaches the threshold's, decodes its box from the expectation
 * of a softmax over the 16 bins of each side (DFL), and runs a greedy non-maximum
 * suppression per class (scores above the threshold, best first, a box dropped when its
 * intersection over union with a kept one exceeds the NMS threshold, at most 300).
 *
 *   cc yolov8_detect_nv12.c $(emu cc-flags) -lm -o yolov8_detect_nv12
 *   ./yolov8_detect_nv12 MODEL.hbm PICTURE.ppm [SCORE_THRESHOLD [NMS_THRESHOLD]]
 * The picture must have the model's input size.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hb_dnn.h"
#include "hb_sys.h"
#include "sample_image.h"

#define CLASSES_NUM 80
#define REG 16
#define NMS_TOP_K 300

#define CHECK(call, what)                                             \
  do {                                                                \
    int32_t rc_ = (call);                                             \
    if (rc_ != 0) {                                                   \
      fprintf(stderr, "[ERROR] %s failed, error code: %d\n", what, (int)rc_); \
      return rc_;                                                     \
    }                                                                 \
  } while (0)

typedef struct {
  double x, y, w, h; /* top-left corner and size, in model pixels */
  double score;
} Box;

typedef struct {
  Box *items;
  int count, room;
} BoxList;

static void push(BoxList *list, Box box) {
  if (list->count == list->room) {
    list->room = list->room ? 2 * list->room : 64;
    list->items = (Box *)realloc(list->items, (size_t)list->room * sizeof(Box));
  }
  list->items[list->count++] = box;
}

static double iou(const Box *a, const Box *b) {
  double x1 = a->x > b->x ? a->x : b->x, y1 = a->y > b->y ? a->y : b->y;
  double x2 = a->x + a->w < b->x + b->w ? a->x + a->w : b->x + b->w;
  double y2 = a->y + a->h < b->y + b->h ? a->y + a->h : b->y + b->h;
  double inter = (x2 - x1 > 0 && y2 - y1 > 0) ? (x2 - x1) * (y2 - y1) : 0.0;
  double both = a->w * a->h + b->w * b->h - inter;
  return both > 0 ? inter / both : 0.0;
}

static const BoxList *sort_list; /* the list the comparison below orders indices of */

/* Best score first (as single-precision scores, the way the OpenCV sample holds them);
 * equal scores keep their order. */
static int by_score(const void *a, const void *b) {
  int i = *(const int *)a, j = *(const int *)b;
  float si = (float)sort_list->items[i].score, sj = (float)sort_list->items[j].score;
  if (si != sj) return si > sj ? -1 : 1;
  return i - j;
}

/* Indices of the boxes NMS keeps, in the order kept; their count. */
static int nms(const BoxList *list, float score_threshold, float nms_threshold, int *kept) {
  int *order = (int *)malloc((size_t)list->count * sizeof(int));
  int n = 0, k = 0;
  for (int i = 0; i < list->count; ++i)
    if ((float)list->items[i].score > score_threshold) order[n++] = i;
  sort_list = list;
  qsort(order, (size_t)n, sizeof(int), by_score);
  if (n > NMS_TOP_K) n = NMS_TOP_K;
  for (int a = 0; a < n; ++a) {
    int keep = 1;
    for (int b = 0; b < k && keep; ++b)
      keep = iou(&list->items[order[a]], &list->items[kept[b]]) <= nms_threshold;
    if (keep) kept[k++] = order[a];
  }
  free(order);
  return k;
}

static void decode(const float *cls_raw, const int32_t *bbox_raw, const float *bbox_scale,
                   int height, int width, int stride, double conf_thres_raw,
                   BoxList *lists) {
  for (int h = 0; h < height; ++h) {
    for (int w = 0; w < width; ++w) {
      const float *cur_cls_raw = cls_raw + (size_t)(h * width + w) * CLASSES_NUM;
      const int32_t *cur_bbox_raw = bbox_raw + (size_t)(h * width + w) * 4 * REG;
      int cls_id = 0;
      for (int i = 1; i < CLASSES_NUM; ++i)
        if (cur_cls_raw[i] > cur_cls_raw[cls_id]) cls_id = i;
      if (cur_cls_raw[cls_id] < conf_thres_raw) continue;
      double score = 1 / (1 + exp(-(double)cur_cls_raw[cls_id]));
      double ltrb[4];
      for (int i = 0; i < 4; ++i) {
        double total = 0.0, sum = 0.0;
        for (int j = 0; j < REG; ++j) {
          int index_id = REG * i + j;
          double dfl = exp((double)cur_bbox_raw[index_id] * (double)bbox_scale[index_id]);
          sum += dfl * j;
          total += dfl;
        }
        ltrb[i] = sum / total;
      }
      if (ltrb[2] + ltrb[0] <= 0 || ltrb[3] + ltrb[1] <= 0) continue;
      double x1 = (w + 0.5 - ltrb[0]) * stride, y1 = (h + 0.5 - ltrb[1]) * stride;
      double x2 = (w + 0.5 + ltrb[2]) * stride, y2 = (h + 0.5 + ltrb[3]) * stride;
      Box box = {x1, y1, x2 - x1, y2 - y1, score};
      push(&lists[cls_id], box);
    }
  }
}

static double clip(double v, double high) { return v < 0 ? 0 : v > high ? high : v; }

/* score_threshold sets the logit cells must reach (in double precision) and, as a float,
 * the NMS's score cut, as the OpenCV sample's NMSBoxes takes it. */
static int run(hbDNNHandle_t dnn_handle, const char *picture, double score_threshold,
               float nms_threshold) {
  int32_t input_count = 0;
  CHECK(hbDNNGetInputCount(&input_count, dnn_handle), "hbDNNGetInputCount");
  hbDNNTensorProperties input_properties;
  CHECK(hbDNNGetInputTensorProperties(&input_properties, dnn_handle, 0),
        "hbDNNGetInputTensorProperties");
  if (input_count > 1 || input_properties.tensorType != HB_DNN_IMG_TYPE_NV12 ||
      input_properties.tensorLayout != HB_DNN_LAYOUT_NCHW ||
      input_properties.validShape.numDimensions != 4) {
    printf("the model's input is not one NV12 NCHW 4-D tensor, please check!\n");
    return -1;
  }
  int input_h = input_properties.validShape.dimensionSize[2];
  int input_w = input_properties.validShape.dimensionSize[3];
  int32_t output_count = 0;
  CHECK(hbDNNGetOutputCount(&output_count, dnn_handle), "hbDNNGetOutputCount");
  if (output_count != 6) {
    printf("Your Model's outputs num is not 6, please check!\n");
    return -1;
  }
  static const int strides[3] = {8, 16, 32};
  int order[6] = {0, 1, 2, 3, 4, 5}, sum = 0;
  for (int i = 0; i < 6; ++i) {
    int want_h = input_h / strides[i / 2], want_w = input_w / strides[i / 2];
    int want_c = i % 2 ? 4 * REG : CLASSES_NUM;
    for (int j = 0; j < 6; ++j) {
      hbDNNTensorProperties p;
      CHECK(hbDNNGetOutputTensorProperties(&p, dnn_handle, j),
            "hbDNNGetOutputTensorProperties");
      if (p.validShape.dimensionSize[1] == want_h && p.validShape.dimensionSize[2] == want_w &&
          p.validShape.dimensionSize[3] == want_c) {
        order[i] = j;
        break;
      }
    }
    sum += order[i];
  }
  if (sum != 15) {
    printf("Outputs order check FAILED, use default\n");
    for (int i = 0; i < 6; ++i) order[i] = i;
  }

  int src_w = 0, src_h = 0;
  uint8_t *bgr = read_ppm_bgr(picture, &src_w, &src_h);
  if (bgr == NULL) return 2;
  if (src_w != input_w || src_h != input_h) {
    fprintf(stderr, "%s is %dx%d; the model takes %dx%d\n", picture, src_w, src_h, input_w,
            input_h);
    free(bgr);
    return 2;
  }
  hbDNNTensor input_tensor;
  memset(&input_tensor, 0, sizeof input_tensor);
  input_tensor.properties = input_properties;
  CHECK(hbSysAllocCachedMem(&input_tensor.sysMem[0], 3 * input_h * input_w / 2),
        "hbSysAllocCachedMem");
  bgr_to_nv12(bgr, input_w, input_h, (uint8_t *)input_tensor.sysMem[0].virAddr);
  free(bgr);
  hbSysFlushMem(&input_tensor.sysMem[0], HB_SYS_MEM_CACHE_CLEAN);
  hbDNNTensor output[6];
  memset(output, 0, sizeof output);
  for (int i = 0; i < 6; ++i) {
    CHECK(hbDNNGetOutputTensorProperties(&output[i].properties, dnn_handle, i),
          "hbDNNGetOutputTensorProperties");
    CHECK(hbSysAllocCachedMem(&output[i].sysMem[0], output[i].properties.alignedByteSize),
          "hbSysAllocCachedMem");
  }

  hbDNNInferCtrlParam infer_ctrl_param;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&infer_ctrl_param);
  hbDNNTaskHandle_t task_handle = NULL;
  hbDNNTensor *out = output;
  CHECK(hbDNNInfer(&task_handle, &out, &input_tensor, dnn_handle, &infer_ctrl_param),
        "hbDNNInfer");
  CHECK(hbDNNWaitTaskDone(task_handle, 0), "hbDNNWaitTaskDone");

  double conf_thres_raw = -log(1 / score_threshold - 1);
  BoxList lists[CLASSES_NUM];
  memset(lists, 0, sizeof lists);
  int rc = 0;
  for (int k = 0; k < 3 && rc == 0; ++k) {
    hbDNNTensor *cls = &output[order[2 * k]], *box = &output[order[2 * k + 1]];
    if (cls->properties.quantiType != NONE) {
      printf("output[order[%d]] QuantiType is not NONE, please check!\n", 2 * k);
      rc = -1;
    } else if (box->properties.quantiType != SCALE) {
      printf("output[order[%d]] QuantiType is not SCALE, please check!\n", 2 * k + 1);
      rc = -1;
    } else {
      hbSysFlushMem(&cls->sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE);
      hbSysFlushMem(&box->sysMem[0], HB_SYS_MEM_CACHE_INVALIDATE);
      decode((const float *)cls->sysMem[0].virAddr, (const int32_t *)box->sysMem[0].virAddr,
             box->properties.scale.scaleData, input_h / strides[k], input_w / strides[k],
             strides[k], conf_thres_raw, lists);
    }
  }
  for (int c = 0; c < CLASSES_NUM && rc == 0; ++c) {
    if (lists[c].count == 0) continue;
    int *kept = (int *)malloc((size_t)lists[c].count * sizeof(int));
    int n = nms(&lists[c], (float)score_threshold, nms_threshold, kept);
    for (int i = 0; i < n; ++i) {
      const Box *b = &lists[c].items[kept[i]];
      printf("class %d score %.3f box (%.1f, %.1f, %.1f, %.1f)\n", c, b->score,
             clip(b->x, src_w), clip(b->y, src_h), clip(b->x + b->w, src_w),
             clip(b->y + b->h, src_h));
    }
    free(kept);
  }
  for (int c = 0; c < CLASSES_NUM; ++c) free(lists[c].items);
  hbDNNReleaseTask(task_handle);
  hbSysFreeMem(&input_tensor.sysMem[0]);
  for (int i = 0; i < 6; ++i) hbSysFreeMem(&output[i].sysMem[0]);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.hbm PICTURE.ppm [SCORE_THRESHOLD [NMS_THRESHOLD]]\n",
            argv[0]);
    return 2;
  }
  double score_threshold = argc > 3 ? atof(argv[3]) : 0.25;
  float nms_threshold = argc > 4 ? (float)atof(argv[4]) : 0.7f;
  if (!(score_threshold > 0 && score_threshold < 1) || !(nms_threshold > 0)) {
    fprintf(stderr, "thresholds: 0 < score < 1, nms > 0\n");
    return 2;
  }
  hbPackedDNNHandle_t packed_dnn_handle = NULL;
  const char *model_file = argv[1];
  CHECK(hbDNNInitializeFromFiles(&packed_dnn_handle, &model_file, 1),
        "hbDNNInitializeFromFiles");
  const char **model_name_list = NULL;
  int32_t model_count = 0;
  CHECK(hbDNNGetModelNameList(&model_name_list, &model_count, packed_dnn_handle),
        "hbDNNGetModelNameList");
  if (model_count > 1) printf("This model file have more than 1 model, only use model 0.\n");
  hbDNNHandle_t dnn_handle = NULL;
  CHECK(hbDNNGetModelHandle(&dnn_handle, packed_dnn_handle, model_name_list[0]),
        "hbDNNGetModelHandle");
  int rc = run(dnn_handle, argv[2], score_threshold, nms_threshold);
  hbDNNRelease(packed_dnn_handle);
  return rc == 0 ? 0 : 1;
}
