/* dmp_dv.h: the user driver API of DMP's DV700 CNN accelerator (dmp_dv), for programs
 * built against emu's libemu_rt. Names, types and signatures follow the driver's public
 * documentation (seed 002), with its raw command structures (version 0 and 1); the weight
 * packers take the PReLU slopes before the output buffer, as the driver's current version
 * does. Errors are the driver's: NULL from a failed creation, a non-zero value (EINVAL,
 * ENOTSUP, ETIMEDOUT) from a failed call, the reason in dmp_dv_get_last_error_message().
 */
#ifndef EMU_DMP_DV_H_
#define EMU_DMP_DV_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DMP_DV_DEV_CONV 1
#define DMP_DV_DEV_FC 2
#define DMP_DV_DEV_COUNT 3
#define DMP_DV_MAX_RUNS 32

typedef struct dmp_dv_context_impl *dmp_dv_context;
typedef struct dmp_dv_mem_impl *dmp_dv_mem;
typedef struct dmp_dv_cmdlist_impl *dmp_dv_cmdlist;

typedef struct dmp_dv_info_impl {
  uint32_t size;    /* of the structure the caller passes */
  uint32_t version; /* the version asked for; the one filled on return */
} dmp_dv_info;

typedef struct dmp_dv_info_v0_impl {
  uint32_t size;
  uint32_t version;
  int32_t ub_size;            /* unified buffer, bytes */
  int32_t max_kernel_size;
  int32_t conv_freq;          /* MHz */
  int32_t fc_freq;            /* MHz */
  int32_t max_fc_vector_size; /* elements */
  int32_t rsvd;
} dmp_dv_info_v0;

/* A place in device memory: a memory handle and an even byte offset. */
typedef struct dmp_dv_buf_impl {
  union {
    dmp_dv_mem mem;
    uint64_t rsvd;
  };
  uint64_t offs;
} dmp_dv_buf;

/* The header of every raw command. */
typedef struct dmp_dv_cmdraw {
  uint32_t size;
  uint8_t device_type;
  uint8_t version;
  uint8_t rsvd[2];
} dmp_dv_cmdraw;

/* One run of a convolution command; packed fields hold a value per byte (pads: left,
 * right, top, bottom; sizes, strides and dilations: x, y). */
typedef struct dmp_dv_cmdraw_conv_v0_run {
  dmp_dv_buf weight_buf;
  uint32_t conv_pad;
  uint32_t pool_pad;
  uint16_t m;              /* output channels; 0 ends the runs */
  uint16_t conv_enable;    /* 0 off, 1 on, 3 depthwise, 5 deconvolution, 7 both */
  uint16_t p;              /* kernel width | height << 8 */
  uint16_t pz;
  uint16_t conv_stride;
  uint16_t conv_dilation;
  uint16_t weight_fmt;     /* 1 FP16, 3 8-bit quantised */
  uint16_t pool_enable;    /* 0 off, 1 max, 2 average, 4 upsampling */
  uint16_t pool_avg_param; /* FP16 */
  uint16_t pool_size;
  uint16_t pool_stride;
  uint16_t actfunc;        /* 0 none, 1 tanh, 2 leaky ReLU, 3 sigmoid, 4 PReLU, 5 ELU, 6 ReLU6 */
  uint16_t actfunc_param;  /* FP16 */
  uint16_t rectifi_en;
  uint16_t lrn;
  uint16_t rsvd;
} dmp_dv_cmdraw_conv_v0_run;

typedef struct dmp_dv_cmdraw_conv_v0 {
  dmp_dv_cmdraw header; /* size, DMP_DV_DEV_CONV, version 0 */
  dmp_dv_buf input_buf;
  dmp_dv_buf output_buf;
  dmp_dv_buf eltwise_buf;
  uint32_t topo;        /* bit per run: 1 its output goes to memory */
  uint16_t w;
  uint16_t h;
  uint16_t z;
  uint16_t c;
  uint16_t input_circular_offset;
  uint16_t output_mode; /* 0 concatenation, 1 element-wise add */
  dmp_dv_cmdraw_conv_v0_run run[DMP_DV_MAX_RUNS];
} dmp_dv_cmdraw_conv_v0;

typedef struct dmp_dv_cmdraw_conv_v1 {
  dmp_dv_cmdraw header; /* size, DMP_DV_DEV_CONV, version 1 */
  dmp_dv_buf u8tofp16_table;
  uint16_t to_bgr;
  uint16_t rsvd[3];
  dmp_dv_cmdraw_conv_v0 conv_cmd;
} dmp_dv_cmdraw_conv_v1;

typedef struct dmp_dv_cmdraw_fc_v0 {
  dmp_dv_cmdraw header; /* size, DMP_DV_DEV_FC, version 0 */
  dmp_dv_buf weight_buf;
  dmp_dv_buf input_buf;
  dmp_dv_buf output_buf;
  uint16_t input_size;
  uint16_t output_size;
  uint16_t weight_fmt;
  uint16_t actfunc;
  uint16_t actfunc_param;
  uint16_t rsvd[3];
} dmp_dv_cmdraw_fc_v0;

const char *dmp_dv_get_version_string(void);
const char *dmp_dv_get_last_error_message(void);

dmp_dv_context dmp_dv_context_create(void);
void dmp_dv_context_release(dmp_dv_context ctx);
void dmp_dv_context_retain(dmp_dv_context ctx);
const char *dmp_dv_context_get_info_string(dmp_dv_context ctx);
int dmp_dv_context_get_info(dmp_dv_context ctx, dmp_dv_info *info);
int dmp_dv_fpga_device_exists(dmp_dv_context ctx, int dev_type_id);

dmp_dv_mem dmp_dv_mem_alloc(dmp_dv_context ctx, size_t size);
void dmp_dv_mem_release(dmp_dv_mem mem);
void dmp_dv_mem_retain(dmp_dv_mem mem);
uint8_t *dmp_dv_mem_map(dmp_dv_mem mem);
void dmp_dv_mem_unmap(dmp_dv_mem mem);
int dmp_dv_mem_sync_start(dmp_dv_mem mem, int rd, int wr);
int dmp_dv_mem_sync_end(dmp_dv_mem mem);
size_t dmp_dv_mem_get_size(dmp_dv_mem mem);
size_t dmp_dv_mem_get_total_size(void);

dmp_dv_cmdlist dmp_dv_cmdlist_create(dmp_dv_context ctx);
void dmp_dv_cmdlist_release(dmp_dv_cmdlist cmdlist);
void dmp_dv_cmdlist_retain(dmp_dv_cmdlist cmdlist);
int dmp_dv_cmdlist_add_raw(dmp_dv_cmdlist cmdlist, dmp_dv_cmdraw *cmd);
int dmp_dv_cmdlist_commit(dmp_dv_cmdlist cmdlist);
int64_t dmp_dv_cmdlist_exec(dmp_dv_cmdlist cmdlist);
int dmp_dv_cmdlist_wait(dmp_dv_cmdlist cmdlist, int64_t exec_id);
int64_t dmp_dv_cmdlist_get_last_exec_time(dmp_dv_cmdlist cmdlist);

int dmp_dv_pack_conv_weights(int n_channels, int kx, int ky, int n_kernels,
                             const uint16_t *quant_map, const void *weights,
                             const uint16_t *bias, const uint16_t *prelu,
                             uint8_t *packed_weights, size_t *packed_weights_size);
int dmp_dv_pack_dil_weights(int n_channels, int kx, int ky, int n_kernels,
                            const uint16_t *quant_map, const void *weights,
                            const uint16_t *bias, const uint16_t *prelu,
                            uint8_t *packed_weights, size_t *packed_weights_size);
int dmp_dv_pack_fc_weights(int c_input, int h_input, int w_input, int c_output, int h_output,
                           int w_output, const uint16_t *quant_map, const void *weights,
                           const uint16_t *bias, uint8_t *packed_weights,
                           size_t *packed_weights_size);

#ifdef __cplusplus
}
#endif

#endif /* EMU_DMP_DV_H_ */
