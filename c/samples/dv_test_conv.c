/* dv_test_conv.c: convolution configurations checked on DMP's DV700 through the dmp_dv
 * driver, in the style of the driver's tests/test_conv, written for emu's libemu_rt.
 *
 * The folder DATA holds what generate_data.py (the Python port's `Generator`,
 * examples/ports/dv_test_conv.py) writes: a sub-folder per input,
 * `WxHxC_t<tpe>d<deconv>` (tpe 0 a plain convolution, 1 depthwise, > 1 the dilation), and a
 * file set per layer, `KXxKYxM_padLxTxRxB_strideXxY_act<A>` with `.q.bin` (the 256 FP16
 * values the weights index), `.i.bin` (the input, CHW FP16), `.w.bin` (the weights as
 * indices), `.b.bin` (the FP16 biases), `.prelu.bin` (PReLU slopes) and `.o.bin` (the gold
 * output, CHW FP16). Each file set gives an FP16 configuration and, unless its activation is
 * PReLU, an 8-bit quantised one (dilated PReLU layers are left out).
 *
 * Each pass shuffles the configurations and runs them one per command list, then fifty per
 * command list. For each: the weights packed (dmp_dv_pack_conv_weights, or _dil_ for a
 * dilation) into mapped device memory at a pseudo-random 16-byte offset, the input written
 * in the device's WHC8 order into memory first filled with 1000.0, a version-0 conv command
 * with one run added to the list; then commit, exec, wait, and per configuration the output
 * read back between sync_start(1, 0) and sync_end. Its first run is compared with the gold
 * output (exactly for integer data, 1e-3 with an activation; else a bound relative to the
 * value, wider for long sums), and its SHA-256 kept: later runs must give the same bytes.
 * Everything is released after each list, and no device memory may be left.
 *
 *   cc dv_test_conv.c $(emu cc-flags) -lm -o dv_test_conv
 *   ./dv_test_conv [DATA [SEED [PASSES [LOG]]]]     (defaults: data, 1, 2, no log)
 * Prints a line per configuration, in the folder's sorted order: its name, FP16 or Q8,
 * ok or FAILED, and the output's SHA-256; then the totals. Exit status 0 if all passed.
 * The offsets and the shuffles come from a 64-bit LCG seeded with SEED (an MMIX LCG step,
 * the upper 32 bits of the state, modulo the range).
 */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dmp_dv.h"

#define FAILED_ADD_RAW -100
#define PACK_MAX 50 /* configurations in the second command list of a pass */
#define NAME_MAX_LEN 512

typedef struct {
  int width, height, n_channels, kx, ky, n_kernels;
  int pad_left, pad_top, pad_right, pad_bottom, stride_x, stride_y, activation;
  int tpe;    /* 0 plain, 1 depthwise, > 1 the dilation */
  int deconv; /* 1: a deconvolution */
  int batch_size, quantized, hash_set, failed, pure_ints;
  uint8_t hash[32];
  dmp_dv_mem io_mem, weights_mem;
  size_t io_size, io_offs, weights_offs;
  uint16_t *io_ptr;        /* the mapped input/output memory, from io_offs */
  uint16_t *caffe_output;  /* the gold output, CHW */
} conv_config;

static const char *g_data = "data";
static FILE *g_log;

static void LOG(const char *fmt, ...) {
  if (g_log == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(g_log, fmt, ap);
  va_end(ap);
}

static void ERR(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  if (g_log != NULL) {
    va_start(ap, fmt);
    vfprintf(g_log, fmt, ap);
    va_end(ap);
  }
}

/* --- small helpers ----------------------------------------------------------------------- */

static size_t roundup(size_t a) { return (a + 15) & ~(size_t)15; }

static float half_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 0x1F, frac = h & 0x3FF;
  float v;
  if (exp == 0)
    v = ldexpf((float)frac, -24); /* zero or subnormal */
  else if (exp == 31)
    v = frac ? NAN : INFINITY;
  else
    v = ldexpf((float)(frac | 0x400), exp - 25);
  return sign ? -v : v;
}

static int has_float(const uint16_t *x, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = half_to_float(x[i]);
    if (v != truncf(v)) return 1;
  }
  return 0;
}

static uint64_t g_state;
static uint32_t below(uint32_t n) { /* a pseudo-random number in [0, n) */
  g_state = g_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_state >> 32) % n;
}

/* SHA-256 (FIPS 180-4) of a byte string */
static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
           (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] +
                  w[i];
    uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256(const void *data, size_t n, uint8_t out[32]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const uint8_t *p = data;
  size_t done = 0;
  for (; done + 64 <= n; done += 64) sha256_block(h, p + done);
  uint8_t tail[128] = {0};
  size_t rest = n - done, len = rest + 9 <= 64 ? 64 : 128;
  memcpy(tail, p + done, rest);
  tail[rest] = 0x80;
  uint64_t bits = (uint64_t)n * 8;
  for (int i = 0; i < 8; ++i) tail[len - 1 - i] = (uint8_t)(bits >> (8 * i));
  for (size_t i = 0; i < len; i += 64) sha256_block(h, tail + i);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) out[4 * i + j] = (uint8_t)(h[i] >> (24 - 8 * j));
}

/* --- a configuration --------------------------------------------------------------------- */

static void conf_name(const conv_config *c, char *out, size_t size) {
  snprintf(out, size, "%dx%dx%d_t%dd%d/%dx%dx%d_pad%dx%dx%dx%d_stride%dx%d_act%d", c->width,
           c->height, c->n_channels, c->tpe, c->deconv, c->kx, c->ky, c->n_kernels,
           c->pad_left, c->pad_top, c->pad_right, c->pad_bottom, c->stride_x, c->stride_y,
           c->activation);
}

static const char *kind(const conv_config *c) { return c->quantized ? "Q8" : "FP16"; }

/* the command's pads, left | right << 8 | top << 16 | bottom << 24 (a deconvolution's are
 * what remains of the full kernel) */
static uint32_t pad_fpga(const conv_config *c) {
  int p[4] = {c->pad_left, c->pad_right, c->pad_top, c->pad_bottom};
  if (c->deconv) {
    int dil = (c->tpe & 0xFF) ? (c->tpe & 0xFF) : 1;
    int kw = dil * (c->kx - 1) + 1, kh = dil * (c->ky - 1) + 1;
    p[0] = kw - c->pad_left - 1;
    p[1] = kw - c->pad_right - 1;
    p[2] = kh - c->pad_top - 1;
    p[3] = kh - c->pad_bottom - 1;
  }
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int get_conv_out_width(int width, int kx, int pad_left, int pad_right, int stride,
                              int is_deconv) {
  if (is_deconv) return stride * (width - 1) + kx - pad_left - pad_right;
  return (pad_left + width + pad_right - kx) / stride + 1;
}

static void out_size(const conv_config *c, int *ow, int *oh) {
  int kxf = c->kx, kyf = c->ky;
  if (c->tpe > 1) { /* dilation */
    kxf = (c->kx - 1) * c->tpe + 1;
    kyf = (c->ky - 1) * c->tpe + 1;
  }
  *ow = get_conv_out_width(c->width, kxf, c->pad_left, c->pad_right, c->stride_x, c->deconv);
  *oh = get_conv_out_width(c->height, kyf, c->pad_top, c->pad_bottom, c->stride_y, c->deconv);
}

/* 0 if the device's y is close enough to the gold t, -1 if not */
static int check_err(float y, float t, const conv_config *c) {
  float diff = fabsf(y - t);
  if (c->pure_ints) return diff < (c->activation ? 1.0e-3f : 1.0e-6f) ? 0 : -1;
  int p = (c->kx > c->ky ? c->kx : c->ky) | 1;
  int n_adds = p * p * c->n_channels;
  float ta = fabsf(t);
  float dmax = ta < 0.09f ? 0.03f : ta * 0.33f;
  if (n_adds >= 5 * 5 * 64) dmax = dmax * sqrtf((float)(n_adds / (5.0 * 5.0 * 64.0))) * 1.4f;
  return diff < dmax ? 0 : -1;
}

/* One data file of `n` elements of `size` bytes (exactly that long); NULL on failure. */
static void *read_file(const conv_config *c, const char *suffix, size_t size, size_t n) {
  char name[NAME_MAX_LEN], path[NAME_MAX_LEN + 256];
  conf_name(c, name, sizeof name);
  snprintf(path, sizeof path, "%s/%s.%s.bin", g_data, name, suffix);
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    ERR("fopen() failed for %s\n", path);
    return NULL;
  }
  void *data = malloc(n * size + 1);
  size_t got = data == NULL ? 0 : fread(data, size, n, f);
  if (got != n) {
    ERR("fread() returned %zu while expecting %zu for %s\n", got, n, path);
    free(data);
    data = NULL;
  } else if (fgetc(f) != EOF) {
    ERR("File is bigger than expected: %s\n", path);
    free(data);
    data = NULL;
  }
  fclose(f);
  return data;
}

/* --- test_conv ---------------------------------------------------------------------------- */

#define PREPARE_FAIL(...) \
  do {                    \
    ERR(__VA_ARGS__);     \
    conf->failed = 1;     \
    goto L_DONE;          \
  } while (0)
#define READ_FAIL()   \
  do {                \
    conf->failed = 1; \
    goto L_DONE;      \
  } while (0)

/* Read one configuration's files, fill its memory and add its command; 0 or an error. */
static int prepare(dmp_dv_context ctx, dmp_dv_cmdlist cmdlist, conv_config *conf) {
  int result = -1;
  int weights_dim_1 = conf->tpe == 1 ? 1 : conf->n_channels;
  size_t n_in = (size_t)conf->n_channels * conf->height * conf->width;
  size_t n_w = (size_t)conf->n_kernels * weights_dim_1 * conf->kx * conf->ky;
  uint16_t *quant_map = NULL, *input = NULL, *bias = NULL, *prelu = NULL, *values = NULL;
  uint8_t *indices = NULL;
  int ow, oh;
  out_size(conf, &ow, &oh);

  if ((quant_map = read_file(conf, "q", 2, 256)) == NULL) READ_FAIL();
  if ((input = read_file(conf, "i", 2, n_in)) == NULL) READ_FAIL();
  conf->pure_ints = !has_float(quant_map, 256) && !has_float(input, n_in);
  if ((indices = read_file(conf, "w", 1, n_w)) == NULL) READ_FAIL();
  if ((bias = read_file(conf, "b", 2, conf->n_kernels)) == NULL) READ_FAIL();
  if (conf->activation == 4 && (prelu = read_file(conf, "prelu", 2, conf->n_kernels)) == NULL)
    READ_FAIL();
  if (!conf->hash_set) {
    conf->caffe_output = read_file(conf, "o", 2, (size_t)ow * oh * conf->n_kernels);
    if (conf->caffe_output == NULL) READ_FAIL();
  }

  dmp_dv_cmdraw_conv_v0 cmd;
  memset(&cmd, 0, sizeof cmd);
  cmd.header.size = sizeof cmd;
  cmd.header.device_type = DMP_DV_DEV_CONV;
  cmd.header.version = 0;
  cmd.input_circular_offset = (uint16_t)conf->batch_size;
  cmd.w = (uint16_t)conf->width;
  cmd.h = (uint16_t)conf->height;
  cmd.c = (uint16_t)conf->n_channels;
  cmd.z = 1;
  cmd.topo = 1;
  dmp_dv_cmdraw_conv_v0_run *run = &cmd.run[0];
  run->m = (uint16_t)conf->n_kernels;
  if (conf->deconv)
    run->conv_enable = conf->tpe == 1 ? 7 : 5;
  else
    run->conv_enable = conf->tpe == 1 ? 3 : 1;
  run->conv_dilation =
      conf->tpe <= 1 ? 0 : (uint16_t)((conf->tpe & 0xFF) | ((conf->tpe << 8) & 0xFF00));
  run->p = (uint16_t)(conf->kx | conf->ky << 8);
  if (conf->kx == conf->ky && (conf->io_offs & 16)) run->p = (uint16_t)conf->kx; /* both spellings */
  run->pz = 1;
  run->conv_pad = pad_fpga(conf);
  run->conv_stride = (uint16_t)(conf->stride_x | conf->stride_y << 8);
  run->actfunc = (uint16_t)conf->activation;

  size_t in_elements = roundup((size_t)conf->batch_size * n_in);
  conf->io_size =
      (in_elements + roundup((size_t)conf->batch_size * ow * oh * conf->n_kernels)) * 2;
  conf->io_mem = dmp_dv_mem_alloc(ctx, conf->io_offs + conf->io_size);
  if (conf->io_mem == NULL)
    PREPARE_FAIL("dmp_dv_mem_alloc() failed for %zu bytes: %s\n",
                 conf->io_offs + conf->io_size, dmp_dv_get_last_error_message());
  LOG("Allocated %zu (%zu(+%zu random offset) requested) bytes for input/output\n",
      dmp_dv_mem_get_size(conf->io_mem), conf->io_size, conf->io_offs);
  cmd.input_buf.mem = conf->io_mem;
  cmd.input_buf.offs = conf->io_offs;
  cmd.output_buf.mem = conf->io_mem;
  cmd.output_buf.offs = conf->io_offs + in_elements * 2;

  int (*pack)(int, int, int, int, const uint16_t *, const void *, const uint16_t *,
              const uint16_t *, uint8_t *, size_t *) =
      conf->tpe < 2 ? dmp_dv_pack_conv_weights : dmp_dv_pack_dil_weights;
  const uint16_t *table = conf->quantized ? quant_map : NULL;
  size_t weights_size = 0;
  if (pack(weights_dim_1, conf->kx, conf->ky, conf->n_kernels, table, NULL, NULL, prelu, NULL,
           &weights_size))
    PREPARE_FAIL("Weights packing failed: %s\n", dmp_dv_get_last_error_message());

  conf->weights_mem = dmp_dv_mem_alloc(ctx, (conf->weights_offs + weights_size) * 2 + 65536);
  if (conf->weights_mem == NULL)
    PREPARE_FAIL("dmp_dv_mem_alloc() failed for %zu bytes: %s\n",
                 conf->weights_offs + weights_size, dmp_dv_get_last_error_message());
  LOG("Allocated %zu (%zu(+%zu random offset) requested) bytes for weights\n",
      dmp_dv_mem_get_size(conf->weights_mem), weights_size, conf->weights_offs);
  run->weight_buf.mem = conf->weights_mem;
  run->weight_buf.offs = conf->weights_offs;
  run->weight_fmt = conf->quantized ? 3 : 1;

  uint8_t *weights = dmp_dv_mem_map(conf->weights_mem);
  if (weights == NULL)
    PREPARE_FAIL("dmp_dv_mem_map() failed for weights: %s\n", dmp_dv_get_last_error_message());
  if (dmp_dv_mem_sync_start(conf->weights_mem, 0, 1))
    PREPARE_FAIL("dmp_dv_mem_sync_start() failed for weights: %s\n",
                 dmp_dv_get_last_error_message());
  memset(weights, 0, dmp_dv_mem_get_size(conf->weights_mem));
  weights += conf->weights_offs;

  const void *packed_from = indices;
  if (!conf->quantized) { /* the values instead of their indices */
    values = malloc(n_w * sizeof *values + 1);
    if (values == NULL) PREPARE_FAIL("malloc() failed\n");
    for (size_t i = 0; i < n_w; ++i) values[i] = quant_map[indices[i]];
    packed_from = values;
  }
  if (pack(weights_dim_1, conf->kx, conf->ky, conf->n_kernels, table, packed_from, bias, prelu,
           weights, &weights_size))
    PREPARE_FAIL("Weights packing failed: %s\n", dmp_dv_get_last_error_message());
  if (dmp_dv_mem_sync_end(conf->weights_mem))
    PREPARE_FAIL("dmp_dv_mem_sync_end() failed for weights: %s\n",
                 dmp_dv_get_last_error_message());
  dmp_dv_mem_unmap(conf->weights_mem);

  uint16_t *io = (uint16_t *)dmp_dv_mem_map(conf->io_mem);
  if (io == NULL)
    PREPARE_FAIL("dmp_dv_mem_map() failed for input/output: %s\n",
                 dmp_dv_get_last_error_message());
  if (dmp_dv_mem_sync_start(conf->io_mem, 0, 1))
    PREPARE_FAIL("dmp_dv_mem_sync_start() failed for input/output: %s\n",
                 dmp_dv_get_last_error_message());
  for (size_t i = 0; i < conf->io_size / 2; ++i) io[i] = 0x63D0; /* 1000.0 in FP16 */
  conf->io_ptr = io + (conf->io_offs >> 1);

  /* CHW to the device's order: blocks of at most 8 channels, each x, y, channel */
  size_t o_offs = 0;
  for (int group = 0; group < conf->n_channels; group += 8) {
    int n_chan = conf->n_channels - group < 8 ? conf->n_channels - group : 8;
    for (int x = 0; x < conf->width; ++x)
      for (int y = 0; y < conf->height; ++y)
        for (int k = 0; k < n_chan; ++k)
          conf->io_ptr[o_offs++] =
              input[((size_t)(group + k) * conf->height + y) * conf->width + x];
  }
  for (int i = 1; i < conf->batch_size; ++i) /* the first input copied for the whole batch */
    memcpy(conf->io_ptr + i * n_in, conf->io_ptr, n_in * 2);
  if (dmp_dv_mem_sync_end(conf->io_mem))
    PREPARE_FAIL("dmp_dv_mem_sync_end() failed for input/output: %s\n",
                 dmp_dv_get_last_error_message());

  if (dmp_dv_cmdlist_add_raw(cmdlist, (dmp_dv_cmdraw *)&cmd)) {
    ERR("dmp_dv_cmdlist_add_raw() failed: %s\n", dmp_dv_get_last_error_message());
    conf->failed = 1;
    result = FAILED_ADD_RAW;
    goto L_DONE;
  }
  result = 0;
L_DONE:
  free(quant_map);
  free(input);
  free(indices);
  free(bias);
  free(prelu);
  free(values);
  return result;
}

/* Check one configuration's output after the wait: against the gold output the first time,
 * against the kept hash later; 0 or -1. */
static int compare(conv_config *conf) {
  char name[NAME_MAX_LEN];
  conf_name(conf, name, sizeof name);
  if (dmp_dv_mem_sync_start(conf->io_mem, 1, 0)) {
    ERR("dmp_dv_mem_sync_start() failed for input/output: %s\n",
        dmp_dv_get_last_error_message());
    conf->failed = 1;
    return -1;
  }
  int ow, oh;
  out_size(conf, &ow, &oh);
  size_t o_offs = roundup((size_t)conf->batch_size * conf->width * conf->height * conf->n_channels);
  size_t out_elements = (size_t)oh * ow * conf->n_kernels;
  const uint16_t *out = conf->io_ptr + o_offs;
  if (conf->hash_set) {
    uint8_t hash[32];
    sha256(out, conf->batch_size * out_elements * 2, hash);
    if (memcmp(hash, conf->hash, 32)) {
      ERR("Hash differs\n");
      conf->failed = 1;
      return -1;
    }
  } else {
    float max_diff = 0.0f;
    size_t oo = 0;
    for (int group = 0; group < conf->n_kernels; group += 8) {
      int n_chan = conf->n_kernels - group < 8 ? conf->n_kernels - group : 8;
      float bad_diff = -1.0f, bad_y = 0.0f, bad_t = 0.0f;
      int bad_x = 0, bad_yy = 0, bad_k = 0;
      for (int x = 0; x < ow; ++x)
        for (int y = 0; y < oh; ++y)
          for (int k = 0; k < n_chan; ++k) {
            float t = half_to_float(conf->caffe_output[((size_t)(group + k) * oh + y) * ow + x]);
            float v = half_to_float(out[oo++]);
            float diff = fabsf(v - t);
            if (check_err(v, t, conf)) {
              if (diff > bad_diff) {
                bad_diff = diff, bad_y = v, bad_t = t;
                bad_x = x, bad_yy = y, bad_k = k;
              }
            } else if (diff > max_diff) {
              max_diff = diff;
            }
          }
      if (bad_diff >= 0.0f) {
        ERR("FAILED: failed_diff=%.6f on y=%.6f and t=%.6f xy=(%d, %d) chan=%d %s %s\n",
            bad_diff, bad_y, bad_t, bad_x, bad_yy, group + bad_k, name, kind(conf));
        conf->failed = 1;
        return -1;
      }
    }
    LOG("%s %s: max_diff=%.6f\n", name, kind(conf), max_diff);
    for (int i = 1; i < conf->batch_size; ++i)
      if (memcmp(out, out + i * out_elements, out_elements * 2)) {
        ERR("FAILED: batch_size=%d sample=%d: %s\n", conf->batch_size, i, name);
        conf->failed = 1;
        return -1;
      }
    size_t output_size = conf->batch_size * out_elements * 2;
    if (o_offs * 2 + output_size > conf->io_size) {
      ERR("Incorrect allocation size for input/output\n");
      exit(-1);
    }
    sha256(out, output_size, conf->hash);
    conf->hash_set = 1;
  }
  if (dmp_dv_mem_sync_end(conf->io_mem)) {
    ERR("dmp_dv_mem_sync_end() failed for input/output: %s\n", dmp_dv_get_last_error_message());
    conf->failed = 1;
    return -1;
  }
  return 0;
}

static int g_n_fd = -1;

static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') ++n;
  closedir(d);
  return n;
}

static void fail_single(conv_config **confs, int n) {
  if (n == 1) confs[0]->failed = 1; /* a list of one that fails marks its configuration */
}

/* Run `n` configurations in one command list; 0, FAILED_ADD_RAW or -1. */
static int test_conv(conv_config **confs, int n) {
  int result = -1;
  dmp_dv_context ctx = NULL;
  dmp_dv_cmdlist cmdlist = NULL;
  LOG("ENTER: test_conv: %d commands\n", n);

  ctx = dmp_dv_context_create();
  if (ctx == NULL) {
    ERR("dmp_dv_context_create() failed: %s\n", dmp_dv_get_last_error_message());
    goto L_EXIT;
  }
  LOG("Successfully created context: %s\n", dmp_dv_context_get_info_string(ctx));
  cmdlist = dmp_dv_cmdlist_create(ctx);
  if (cmdlist == NULL) {
    ERR("dmp_dv_cmdlist_create() failed: %s\n", dmp_dv_get_last_error_message());
    goto L_EXIT;
  }
  for (int i = 0; i < n; ++i) {
    int code = prepare(ctx, cmdlist, confs[i]);
    if (code) {
      result = code;
      goto L_EXIT;
    }
  }
  if (dmp_dv_cmdlist_commit(cmdlist)) {
    ERR("dmp_dv_cmdlist_commit() failed: %s\n", dmp_dv_get_last_error_message());
    fail_single(confs, n);
    goto L_EXIT;
  }
  int64_t exec_id = dmp_dv_cmdlist_exec(cmdlist);
  if (exec_id < 0) {
    ERR("dmp_dv_cmdlist_exec() failed: %s\n", dmp_dv_get_last_error_message());
    fail_single(confs, n);
    goto L_EXIT;
  }
  if (dmp_dv_cmdlist_wait(cmdlist, exec_id)) {
    ERR("dmp_dv_cmdlist_wait() failed: %s\n", dmp_dv_get_last_error_message());
    fail_single(confs, n);
    goto L_EXIT;
  }
  LOG("Execution has completed\n");
  for (int i = 0; i < n; ++i)
    if (compare(confs[i])) goto L_EXIT;
  result = 0;
  LOG("SUCCESS: test_conv\n");

L_EXIT:
  if (!result && n) {
    size_t total_size = dmp_dv_mem_get_total_size();
    if (total_size) {
      LOG("Totally allocated: %zu bytes\n", total_size);
    } else {
      ERR("dmp_dv_mem_get_total_size() returned zero while it shouldn't\n");
      result = -1;
    }
  }
  dmp_dv_cmdlist_release(cmdlist);
  for (int i = n - 1; i >= 0; --i) {
    conv_config *conf = confs[i];
    free(conf->caffe_output);
    conf->caffe_output = NULL;
    dmp_dv_mem_release(conf->io_mem);
    conf->io_mem = NULL;
    conf->io_ptr = NULL;
    conf->io_size = 0;
    dmp_dv_mem_release(conf->weights_mem);
    conf->weights_mem = NULL;
  }
  dmp_dv_context_release(ctx);

  int n_fd = count_fds();
  if (g_n_fd == -1) g_n_fd = n_fd;
  if (n_fd != g_n_fd) {
    ERR("Inconsistent file descriptor count detected, memory leak is probable\n");
    result = -1;
  }
  if (dmp_dv_mem_get_total_size()) {
    ERR("Memory leak detected: %zu bytes left\n", dmp_dv_mem_get_total_size());
    result = -1;
  }
  LOG("EXIT%s: test_conv: %d commands, %d FDs\n", result ? "(FAILED)" : "", n, n_fd);
  return result;
}

/* --- the configurations in DATA ----------------------------------------------------------- */

/* The first `count` numbers of `name` (its non-digits read as blanks); 0 if fewer. */
static int numbers(const char *name, int *out, int count) {
  int found = 0;
  const char *p = name;
  while (*p && found < count) {
    if (*p >= '0' && *p <= '9') {
      long v = 0;
      while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
      out[found++] = (int)v;
    } else {
      ++p;
    }
  }
  return found == count;
}

static int key_cmp(const void *pa, const void *pb) {
  const conv_config *a = pa, *b = pb;
  const int ka[] = {a->width, a->height, a->n_channels, a->tpe, a->deconv, a->kx, a->ky,
                    a->n_kernels, a->pad_left, a->pad_top, a->pad_right, a->pad_bottom,
                    a->stride_x, a->stride_y, a->activation, a->quantized};
  const int kb[] = {b->width, b->height, b->n_channels, b->tpe, b->deconv, b->kx, b->ky,
                    b->n_kernels, b->pad_left, b->pad_top, b->pad_right, b->pad_bottom,
                    b->stride_x, b->stride_y, b->activation, b->quantized};
  for (size_t i = 0; i < sizeof ka / sizeof ka[0]; ++i)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

static int push(conv_config **all, int *n, int *cap, const conv_config *c) {
  if (*n == *cap) {
    int bigger = *cap ? 2 * *cap : 64;
    conv_config *grown = realloc(*all, (size_t)bigger * sizeof **all);
    if (grown == NULL) return -1;
    *all = grown;
    *cap = bigger;
  }
  (*all)[(*n)++] = *c;
  return 0;
}

/* Every configuration whose files are in DATA, sorted, each once; NULL if none. */
static conv_config *load_configurations(int *count) {
  conv_config *all = NULL;
  int n = 0, cap = 0;
  *count = 0;
  DIR *top = opendir(g_data);
  if (top == NULL) {
    ERR("Could not open \"%s\" folder\n", g_data);
    return NULL;
  }
  struct dirent *d;
  while ((d = readdir(top)) != NULL) {
    int head[5];
    char sub[NAME_MAX_LEN + 256];
    struct stat st;
    if (!numbers(d->d_name, head, 5)) continue;
    snprintf(sub, sizeof sub, "%s/%s", g_data, d->d_name);
    if (stat(sub, &st) || !S_ISDIR(st.st_mode)) continue;
    DIR *files = opendir(sub);
    if (files == NULL) continue;
    struct dirent *f;
    while ((f = readdir(files)) != NULL) {
      int tail[10];
      if (!numbers(f->d_name, tail, 10)) continue;
      conv_config c;
      memset(&c, 0, sizeof c);
      c.width = head[0], c.height = head[1], c.n_channels = head[2];
      c.tpe = head[3], c.deconv = head[4];
      c.kx = tail[0], c.ky = tail[1], c.n_kernels = tail[2];
      c.pad_left = tail[3], c.pad_top = tail[4], c.pad_right = tail[5], c.pad_bottom = tail[6];
      c.stride_x = tail[7], c.stride_y = tail[8], c.activation = tail[9];
      if (c.tpe > 1 && c.activation == 4) continue; /* PReLU limitation */
      if (c.activation != 4) { /* PReLU limitation */
        c.quantized = 1;
        if (push(&all, &n, &cap, &c)) break;
      }
      c.quantized = 0;
      if (push(&all, &n, &cap, &c)) break;
    }
    closedir(files);
  }
  closedir(top);
  if (n == 0) {
    free(all);
    LOG("Loaded 0 configurations\n");
    return NULL;
  }
  qsort(all, (size_t)n, sizeof *all, key_cmp);
  int unique = 1;
  for (int i = 1; i < n; ++i)
    if (key_cmp(&all[i], &all[unique - 1])) all[unique++] = all[i];
  *count = unique;
  LOG("Loaded %d configurations\n", unique);
  return all;
}

static void count_result(int res, int *n_ok, int *n_add_raw, int *n_err) {
  if (!res)
    ++*n_ok;
  else if (res == FAILED_ADD_RAW)
    ++*n_add_raw;
  else
    ++*n_err;
}

int main(int argc, char **argv) {
  if (argc > 1) g_data = argv[1];
  g_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 1u;
  int n_passes = argc > 3 ? atoi(argv[3]) : 2;
  if (argc > 4 && (g_log = fopen(argv[4], "w")) == NULL) {
    fprintf(stderr, "fopen() failed for %s\n", argv[4]);
    return 2;
  }
  int n_configs = 0;
  conv_config *configs = load_configurations(&n_configs);
  conv_config **order = malloc((size_t)(n_configs ? n_configs : 1) * sizeof *order);
  conv_config **confs = malloc((size_t)(n_configs ? n_configs : 1) * sizeof *confs);
  if (order == NULL || confs == NULL) {
    fprintf(stderr, "malloc() failed\n");
    return 2;
  }
  for (int i = 0; i < n_configs; ++i) order[i] = &configs[i];

  int n_ok = 0, n_add_raw = 0, n_err = 0;
  const int pack_sizes[2] = {1, PACK_MAX};
  for (int pass = 0; pass < n_passes; ++pass) {
    for (int i = n_configs - 1; i > 0; --i) { /* shuffle the configurations' order */
      int j = (int)below((uint32_t)i + 1);
      conv_config *swap = order[i];
      order[i] = order[j];
      order[j] = swap;
    }
    for (int s = 0; s < 2; ++s) {
      int n = 0;
      for (int i = 0; i < n_configs; ++i) {
        conv_config *conf = order[i];
        if (conf->failed) continue;
        conf->io_offs = (size_t)below(1025) << 4;
        conf->weights_offs = (size_t)below(1025) << 4;
        if (conf->batch_size != 1) { /* emu's device runs one sample per command */
          conf->batch_size = 1;
          conf->hash_set = 0;
        }
        confs[n++] = conf;
        if (n < pack_sizes[s]) continue;
        count_result(test_conv(confs, n), &n_ok, &n_add_raw, &n_err);
        n = 0;
      }
      if (n) count_result(test_conv(confs, n), &n_ok, &n_add_raw, &n_err);
    }
  }

  for (int i = 0; i < n_configs; ++i) {
    char name[NAME_MAX_LEN], hex[65] = "-";
    conf_name(&configs[i], name, sizeof name);
    if (configs[i].hash_set)
      for (int j = 0; j < 32; ++j) snprintf(hex + 2 * j, 3, "%02x", configs[i].hash[j]);
    printf("%s %s %s %s\n", name, kind(&configs[i]), configs[i].failed ? "FAILED" : "ok", hex);
  }
  printf("Tests succeeded: %d\n", n_ok);
  printf("Tests failed on dmp_dv_cmdlist_add_raw: %d\n", n_add_raw);
  printf("Tests failed to produce correct results: %d\n", n_err);
  printf("Number of configurations tested: %d\n", n_configs);
  free(confs);
  free(order);
  free(configs);
  if (g_log != NULL) fclose(g_log);
  return n_err || n_add_raw || n_configs == 0 ? 1 : 0;
}
