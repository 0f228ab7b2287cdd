/* The samples' picture reading and BGR-to-NV12 conversion (c/samples/sample_image.h) alone:
 * reads a PPM and writes its NV12 frame to stdout. */
#include <stdio.h>
#include <stdlib.h>

#include "../../c/samples/sample_image.h"

int main(int argc, char **argv) {
  int width = 0, height = 0;
  uint8_t *bgr = argc > 1 ? read_ppm_bgr(argv[1], &width, &height) : NULL;
  if (bgr == NULL || width % 2 || height % 2) return 2;
  size_t size = (size_t)width * height * 3 / 2;
  uint8_t *nv12 = (uint8_t *)malloc(size);
  bgr_to_nv12(bgr, width, height, nv12);
  fwrite(nv12, 1, size, stdout);
  return 0;
}
