/* hb_dsp_cv.h: the DSP's computer-vision library (hbDSP<Name>), for programs
 * built against emu's libemu_rt. Generated from emu's operator table by
 * tools/cv_header.py: do not edit. An operator's call queues it on the DSP like
 * hbDSPRpc; wait for and release its task with hbDSPWaitTaskDone and
 * hbDSPReleaseTask. Clean a source the CPU wrote, invalidate the destination
 * before the CPU reads it. */
#ifndef EMU_HB_DSP_CV_H_
#define EMU_HB_DSP_CV_H_

#include <stdint.h>

#include "hb_dsp.h"
#include "hb_sys.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HB_DSP_IMAGE_U8C1 1
#define HB_DSP_IMAGE_U8C3 2
#define HB_DSP_IMAGE_S16C1 3
#define HB_DSP_IMAGE_F32C1 4
#define HB_DSP_IMAGE_S32C1 5
#define HB_DSP_IMAGE_U16C1 6
#define HB_DSP_IMAGE_NV12 7
#define HB_DSP_IMAGE_S16C2 8
#define HB_DSP_IMAGE_F32C2 9

/* An image in a pool buffer: offset bytes in, rows stride bytes apart. */
typedef struct {
  hbSysMem mem;
  int32_t offset;
  int32_t width;
  int32_t height;
  int32_t stride;
  int32_t format;
} hbDSPImage;

/* Fixed-level threshold of a uint8 image. */
typedef struct {
  double thresh;
  double maxval;
  int32_t type;
} hbDSPThresholdParam;
#define HB_DSP_INITIALIZE_THRESHOLD_PARAM(param) \
  { \
    (param)->thresh = 127.0; \
    (param)->maxval = 255.0; \
    (param)->type = 0; \
  }
int32_t hbDSPThreshold(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPThresholdParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Colour conversion of a uint8 RGB/BGR image to grey or NV12. */
typedef struct {
  int32_t code;
} hbDSPCvtColorParam;
#define HB_DSP_INITIALIZE_CVT_COLOR_PARAM(param) \
  { \
    (param)->code = 7; \
  }
int32_t hbDSPCvtColor(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPCvtColorParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Histogram equalisation of a grey image, as cv2.equalizeHist. */
typedef struct {
  int32_t reserved; /* no parameters */
} hbDSPEqualizeHistParam;
#define HB_DSP_INITIALIZE_EQUALIZE_HIST_PARAM(param) \
  { \
    (param)->reserved = 0; \
  }
int32_t hbDSPEqualizeHist(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPEqualizeHistParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Int32 integral image (H + 1) x (W + 1), as cv2.integral. */
typedef struct {
  int32_t reserved; /* no parameters */
} hbDSPIntegralParam;
#define HB_DSP_INITIALIZE_INTEGRAL_PARAM(param) \
  { \
    (param)->reserved = 0; \
  }
int32_t hbDSPIntegral(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPIntegralParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Box filter (sum or mean of a ksizeX x ksizeY window) of a uint8 image. */
typedef struct {
  int32_t ksizeX;
  int32_t ksizeY;
  int32_t normalize;
  int32_t borderType;
  double borderValue;
} hbDSPBoxFilterParam;
#define HB_DSP_INITIALIZE_BOX_FILTER_PARAM(param) \
  { \
    (param)->ksizeX = 5; \
    (param)->ksizeY = 5; \
    (param)->normalize = 1; \
    (param)->borderType = 4; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPBoxFilter(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPBoxFilterParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Gaussian blur of a uint8 image (OpenCV's bit-exact fixed point). */
typedef struct {
  int32_t ksizeX;
  int32_t ksizeY;
  double sigmaX;
  double sigmaY;
  int32_t borderType;
  double borderValue;
} hbDSPGaussianBlurParam;
#define HB_DSP_INITIALIZE_GAUSSIAN_BLUR_PARAM(param) \
  { \
    (param)->ksizeX = 5; \
    (param)->ksizeY = 5; \
    (param)->sigmaX = 0.0; \
    (param)->sigmaY = 0.0; \
    (param)->borderType = 4; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPGaussianBlur(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPGaussianBlurParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* 2-D correlation of a uint8 image with a kernel of up to 5 x 5 (float32). */
typedef struct {
  int32_t ksize;
  double kernel[25];
  double delta;
  int32_t borderType;
  double borderValue;
} hbDSPFilter2DParam;
#define HB_DSP_INITIALIZE_FILTER2D_PARAM(param) \
  { \
    (param)->ksize = 3; \
    (param)->kernel[0] = 0.0; \
    (param)->kernel[1] = -1.0; \
    (param)->kernel[2] = 0.0; \
    (param)->kernel[3] = 0.0; \
    (param)->kernel[4] = 0.0; \
    (param)->kernel[5] = -1.0; \
    (param)->kernel[6] = 5.0; \
    (param)->kernel[7] = -1.0; \
    (param)->kernel[8] = 0.0; \
    (param)->kernel[9] = 0.0; \
    (param)->kernel[10] = 0.0; \
    (param)->kernel[11] = -1.0; \
    (param)->kernel[12] = 0.0; \
    (param)->kernel[13] = 0.0; \
    (param)->kernel[14] = 0.0; \
    (param)->kernel[15] = 0.0; \
    (param)->kernel[16] = 0.0; \
    (param)->kernel[17] = 0.0; \
    (param)->kernel[18] = 0.0; \
    (param)->kernel[19] = 0.0; \
    (param)->kernel[20] = 0.0; \
    (param)->kernel[21] = 0.0; \
    (param)->kernel[22] = 0.0; \
    (param)->kernel[23] = 0.0; \
    (param)->kernel[24] = 0.0; \
    (param)->delta = 0.0; \
    (param)->borderType = 4; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPFilter2D(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPFilter2DParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Separable filter of a uint8 image: kernelX along rows, kernelY along columns. */
typedef struct {
  int32_t ksizeX;
  int32_t ksizeY;
  double kernelX[7];
  double kernelY[7];
  double delta;
  int32_t borderType;
  double borderValue;
} hbDSPSepFilter2DParam;
#define HB_DSP_INITIALIZE_SEP_FILTER2D_PARAM(param) \
  { \
    (param)->ksizeX = 5; \
    (param)->ksizeY = 5; \
    (param)->kernelX[0] = 0.0625; \
    (param)->kernelX[1] = 0.25; \
    (param)->kernelX[2] = 0.375; \
    (param)->kernelX[3] = 0.25; \
    (param)->kernelX[4] = 0.0625; \
    (param)->kernelX[5] = 0.0; \
    (param)->kernelX[6] = 0.0; \
    (param)->kernelY[0] = 0.0625; \
    (param)->kernelY[1] = 0.25; \
    (param)->kernelY[2] = 0.375; \
    (param)->kernelY[3] = 0.25; \
    (param)->kernelY[4] = 0.0625; \
    (param)->kernelY[5] = 0.0; \
    (param)->kernelY[6] = 0.0; \
    (param)->delta = 0.0; \
    (param)->borderType = 4; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPSepFilter2D(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPSepFilter2DParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Sobel derivative of a uint8 image into int16. */
typedef struct {
  int32_t dx;
  int32_t dy;
  int32_t ksize;
  double scale;
  double delta;
  int32_t borderType;
  double borderValue;
} hbDSPSobelParam;
#define HB_DSP_INITIALIZE_SOBEL_PARAM(param) \
  { \
    (param)->dx = 1; \
    (param)->dy = 0; \
    (param)->ksize = 3; \
    (param)->scale = 1.0; \
    (param)->delta = 0.0; \
    (param)->borderType = 4; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPSobel(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPSobelParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Median of the ksize x ksize neighbourhood (replicated border), as cv2.medianBlur. */
typedef struct {
  int32_t ksize;
} hbDSPMedianBlurParam;
#define HB_DSP_INITIALIZE_MEDIAN_BLUR_PARAM(param) \
  { \
    (param)->ksize = 3; \
  }
int32_t hbDSPMedianBlur(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPMedianBlurParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Maximum over a rectangular structuring element, as cv2.dilate. */
typedef struct {
  int32_t ksizeX;
  int32_t ksizeY;
  int32_t iterations;
  int32_t borderType;
  double borderValue;
} hbDSPDilateParam;
#define HB_DSP_INITIALIZE_DILATE_PARAM(param) \
  { \
    (param)->ksizeX = 3; \
    (param)->ksizeY = 3; \
    (param)->iterations = 1; \
    (param)->borderType = 0; \
    (param)->borderValue = 1.7976931348623157e+308; \
  }
int32_t hbDSPDilate(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPDilateParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Minimum over a rectangular structuring element, as cv2.erode. */
typedef struct {
  int32_t ksizeX;
  int32_t ksizeY;
  int32_t iterations;
  int32_t borderType;
  double borderValue;
} hbDSPErodeParam;
#define HB_DSP_INITIALIZE_ERODE_PARAM(param) \
  { \
    (param)->ksizeX = 3; \
    (param)->ksizeY = 3; \
    (param)->iterations = 1; \
    (param)->borderType = 0; \
    (param)->borderValue = 1.7976931348623157e+308; \
  }
int32_t hbDSPErode(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPErodeParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Mirror a uint8 image (grey or RGB) around an axis or both. */
typedef struct {
  int32_t flipCode;
} hbDSPFlipParam;
#define HB_DSP_INITIALIZE_FLIP_PARAM(param) \
  { \
    (param)->flipCode = 1; \
  }
int32_t hbDSPFlip(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPFlipParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Transpose a uint8 image (W x H -> H x W). */
typedef struct {
  int32_t reserved; /* no parameters */
} hbDSPTransposeParam;
#define HB_DSP_INITIALIZE_TRANSPOSE_PARAM(param) \
  { \
    (param)->reserved = 0; \
  }
int32_t hbDSPTranspose(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPTransposeParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Rotate a uint8 image by 90 or 180 degrees (cv2.rotate). */
typedef struct {
  int32_t rotateCode;
} hbDSPRotateParam;
#define HB_DSP_INITIALIZE_ROTATE_PARAM(param) \
  { \
    (param)->rotateCode = 0; \
  }
int32_t hbDSPRotate(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPRotateParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Resize a uint8 image (nearest or bilinear, as OpenCV). */
typedef struct {
  int32_t dsizeWidth;
  int32_t dsizeHeight;
  int32_t interpolation;
} hbDSPResizeParam;
#define HB_DSP_INITIALIZE_RESIZE_PARAM(param) \
  { \
    (param)->dsizeWidth = 400; \
    (param)->dsizeHeight = 300; \
    (param)->interpolation = 1; \
  }
int32_t hbDSPResize(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPResizeParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Resize a rectangle of a uint8 image. */
typedef struct {
  int32_t roiX;
  int32_t roiY;
  int32_t roiWidth;
  int32_t roiHeight;
  int32_t dsizeWidth;
  int32_t dsizeHeight;
  int32_t interpolation;
} hbDSPRoiResizeParam;
#define HB_DSP_INITIALIZE_ROI_RESIZE_PARAM(param) \
  { \
    (param)->roiX = 160; \
    (param)->roiY = 120; \
    (param)->roiWidth = 320; \
    (param)->roiHeight = 240; \
    (param)->dsizeWidth = 400; \
    (param)->dsizeHeight = 300; \
    (param)->interpolation = 1; \
  }
int32_t hbDSPRoiResize(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPRoiResizeParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Gaussian pyramid down-step of a uint8 image. */
typedef struct {
  int32_t reserved; /* no parameters */
} hbDSPPyrDownParam;
#define HB_DSP_INITIALIZE_PYR_DOWN_PARAM(param) \
  { \
    (param)->reserved = 0; \
  }
int32_t hbDSPPyrDown(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPPyrDownParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Gaussian pyramid up-step of a uint8 image. */
typedef struct {
  int32_t reserved; /* no parameters */
} hbDSPPyrUpParam;
#define HB_DSP_INITIALIZE_PYR_UP_PARAM(param) \
  { \
    (param)->reserved = 0; \
  }
int32_t hbDSPPyrUp(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPPyrUpParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Affine warp of a uint8 grey or RGB image (cv2.warpAffine). */
typedef struct {
  double M[6];
  int32_t dsizeWidth;
  int32_t dsizeHeight;
  int32_t inverseMap;
  int32_t interpolation;
  int32_t borderMode;
  double borderValue;
} hbDSPWarpAffineParam;
#define HB_DSP_INITIALIZE_WARP_AFFINE_PARAM(param) \
  { \
    (param)->M[0] = 0.8863269777109872; \
    (param)->M[1] = 0.1562833599002373; \
    (param)->M[2] = -1.1326392435728678; \
    (param)->M[3] = -0.1562833599002373; \
    (param)->M[4] = 0.8863269777109872; \
    (param)->M[5] = 77.292200517439; \
    (param)->dsizeWidth = 0; \
    (param)->dsizeHeight = 0; \
    (param)->inverseMap = 0; \
    (param)->interpolation = 1; \
    (param)->borderMode = 0; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPWarpAffine(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPWarpAffineParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Perspective warp of a uint8 grey or RGB image (cv2.warpPerspective). */
typedef struct {
  double M[9];
  int32_t dsizeWidth;
  int32_t dsizeHeight;
  int32_t inverseMap;
  int32_t interpolation;
  int32_t borderMode;
  double borderValue;
} hbDSPWarpPerspectiveParam;
#define HB_DSP_INITIALIZE_WARP_PERSPECTIVE_PARAM(param) \
  { \
    (param)->M[0] = 0.9; \
    (param)->M[1] = 0.08; \
    (param)->M[2] = 20.0; \
    (param)->M[3] = -0.03; \
    (param)->M[4] = 0.95; \
    (param)->M[5] = 30.0; \
    (param)->M[6] = -0.0001; \
    (param)->M[7] = 5e-05; \
    (param)->M[8] = 1.0; \
    (param)->dsizeWidth = 0; \
    (param)->dsizeHeight = 0; \
    (param)->inverseMap = 0; \
    (param)->interpolation = 1; \
    (param)->borderMode = 0; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPWarpPerspective(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPWarpPerspectiveParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Uint8 grey or RGB image sampled at float32 maps (cv2.remap). */
typedef struct {
  int32_t interpolation;
  int32_t borderMode;
  double borderValue;
} hbDSPRemapParam;
#define HB_DSP_INITIALIZE_REMAP_PARAM(param) \
  { \
    (param)->interpolation = 1; \
    (param)->borderMode = 0; \
    (param)->borderValue = 0.0; \
  }
int32_t hbDSPRemap(hbDSPTask_t *taskHandle, const hbDSPImage *src, const hbDSPImage *mapX, const hbDSPImage *mapY, hbDSPImage *dst,
    const hbDSPRemapParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Canny edges of a uint8 grey image (255 on edges). */
typedef struct {
  double threshold1;
  double threshold2;
  int32_t apertureSize;
  int32_t L2gradient;
} hbDSPCannyParam;
#define HB_DSP_INITIALIZE_CANNY_PARAM(param) \
  { \
    (param)->threshold1 = 50.0; \
    (param)->threshold2 = 150.0; \
    (param)->apertureSize = 3; \
    (param)->L2gradient = 0; \
  }
int32_t hbDSPCanny(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPCannyParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Harris corner response of a uint8 grey image (float32). */
typedef struct {
  int32_t blockSize;
  int32_t ksize;
  double k;
  int32_t borderType;
} hbDSPCornerHarrisParam;
#define HB_DSP_INITIALIZE_CORNER_HARRIS_PARAM(param) \
  { \
    (param)->blockSize = 2; \
    (param)->ksize = 3; \
    (param)->k = 0.04; \
    (param)->borderType = 4; \
  }
int32_t hbDSPCornerHarris(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPCornerHarrisParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

/* Edge-preserving bilateral filter of a uint8 grey or 3-channel image. */
typedef struct {
  int32_t d;
  double sigmaColor;
  double sigmaSpace;
  int32_t borderType;
} hbDSPBilateralFilterParam;
#define HB_DSP_INITIALIZE_BILATERAL_FILTER_PARAM(param) \
  { \
    (param)->d = 9; \
    (param)->sigmaColor = 75.0; \
    (param)->sigmaSpace = 75.0; \
    (param)->borderType = 4; \
  }
int32_t hbDSPBilateralFilter(hbDSPTask_t *taskHandle, const hbDSPImage *src, hbDSPImage *dst,
    const hbDSPBilateralFilterParam *param, hbDSPRpcCtrlParam *rpcCtrlParam);

#ifdef __cplusplus
}
#endif

#endif /* EMU_HB_DSP_CV_H_ */
