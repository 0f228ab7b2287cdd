/* sample_image.h: the pictures the samples read, in plain C (the board samples use OpenCV
 * for this): binary PPM files (P6, 8-bit) as BGR pixels, as cv::imread gives them, and
 * BGR to NV12 with OpenCV's COLOR_BGR2YUV_I420 arithmetic (BT.601 limited range, 20-bit
 * fixed point, U and V of each 2x2 block from its top-left pixel) with U and V interleaved.
 */
#ifndef SAMPLE_IMAGE_H_
#define SAMPLE_IMAGE_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static inline int ppm_token(FILE *f, int *value) {
  int c = fgetc(f);
  while (c == '#' || c == ' ' || c == '\t' || c == '\r' || c == '\n') {
    if (c == '#')
      while (c != '\n' && c != EOF) c = fgetc(f);
    c = fgetc(f);
  }
  if (c < '0' || c > '9') return -1;
  *value = 0;
  while (c >= '0' && c <= '9') {
    *value = *value * 10 + (c - '0');
    if (*value > 1 << 20) return -1;
    c = fgetc(f);
  }
  return 0; /* the one white-space byte after the number is consumed */
}

/* A P6 file's pixels as BGR rows (malloc'ed; free it), or NULL with a message. */
static inline uint8_t *read_ppm_bgr(const char *path, int *width, int *height) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    return NULL;
  }
  int maxval = 0;
  if (fgetc(f) != 'P' || fgetc(f) != '6' || ppm_token(f, width) || ppm_token(f, height) ||
      ppm_token(f, &maxval) || maxval != 255 || *width <= 0 || *height <= 0) {
    fprintf(stderr, "%s: not an 8-bit binary PPM (P6) file\n", path);
    fclose(f);
    return NULL;
  }
  size_t bytes = (size_t)*width * (size_t)*height * 3;
  uint8_t *pixels = (uint8_t *)malloc(bytes);
  if (pixels == NULL || fread(pixels, 1, bytes, f) != bytes) {
    fprintf(stderr, "%s: truncated\n", path);
    free(pixels);
    fclose(f);
    return NULL;
  }
  fclose(f);
  for (size_t i = 0; i < bytes; i += 3) { /* RGB in the file, BGR in memory */
    uint8_t red = pixels[i];
    pixels[i] = pixels[i + 2];
    pixels[i + 2] = red;
  }
  return pixels;
}

static inline uint8_t bt601(const uint8_t *bgr, int32_t r, int32_t g, int32_t b, int32_t offset) {
  int32_t v = (r * bgr[2] + g * bgr[1] + b * bgr[0] + offset + (1 << 19)) >> 20;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* BGR pixels (even width and height) into an NV12 frame of width * height * 3 / 2 bytes. */
static inline void bgr_to_nv12(const uint8_t *bgr, int width, int height, uint8_t *nv12) {
  uint8_t *uv = nv12 + (size_t)width * height;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const uint8_t *p = bgr + ((size_t)y * width + x) * 3;
      nv12[(size_t)y * width + x] = bt601(p, 269484, 528482, 102760, 16 << 20);
      if (y % 2 == 0 && x % 2 == 0) {
        uint8_t *pair = uv + (size_t)(y / 2) * width + x;
        pair[0] = bt601(p, -155188, -305135, 460324, 128 << 20);
        pair[1] = bt601(p, 460324, -385875, -74448, 128 << 20);
      }
    }
  }
}

#endif /* SAMPLE_IMAGE_H_ */
