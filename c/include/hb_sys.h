/* hb_sys.h: the board's system-memory API (hbSys), for programs built against emu's
 * libemu_rt. Names, types and signatures follow the public J5 runtime documentation; the
 * status values are emu's (emu.runtime.hbsys) and are checked against it by emu's tests.
 * Compare status codes with these names, never with literal numbers.
 */
#ifndef EMU_HB_SYS_H_
#define EMU_HB_SYS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define HB_SYS_SUCCESS 0
#define HB_SYS_INVALID_ARGUMENT -6100001
#define HB_SYS_OUT_OF_MEMORY -6100002
#define HB_SYS_INVALID_MEMORY -6100003
#define HB_SYS_WRONG_THREAD -6100004
#define HB_SYS_MEM_IN_USE -6100005
#define HB_SYS_WRONG_RELEASE -6100006

/* BPU and DSP cores, as bit masks (0: any core). */
typedef enum {
  HB_BPU_CORE_ANY = 0,
  HB_BPU_CORE_0 = 1,
  HB_BPU_CORE_1 = 2
} hbBPUCore;

typedef enum {
  HB_DSP_CORE_ANY = 0,
  HB_DSP_CORE_0 = 1,
  HB_DSP_CORE_1 = 2
} hbDSPCore;

/* A buffer of the shared memory pool: its physical address (what the accelerators see),
 * the CPU's pointer to it, and its size in bytes. */
typedef struct {
  uint64_t phyAddr;
  void *virAddr;
  uint32_t memSize;
} hbSysMem;

/* Cache maintenance: invalidate before the CPU reads what an accelerator wrote, clean
 * after the CPU wrote what an accelerator will read. */
typedef enum {
  HB_SYS_MEM_CACHE_INVALIDATE = 1,
  HB_SYS_MEM_CACHE_CLEAN = 2
} hbSysMemFlushFlag;

int32_t hbSysAllocMem(hbSysMem *mem, uint32_t size);
int32_t hbSysAllocCachedMem(hbSysMem *mem, uint32_t size);
int32_t hbSysFlushMem(hbSysMem *mem, int32_t flag);
int32_t hbSysFreeMem(hbSysMem *mem);
int32_t hbSysWriteMem(hbSysMem *dest, char *src, uint32_t size);
int32_t hbSysReadMem(char *dest, hbSysMem *src, uint32_t size);
int32_t hbSysRegisterMem(hbSysMem *mem);
int32_t hbSysUnregisterMem(hbSysMem *mem);

#ifdef __cplusplus
}
#endif

#endif /* EMU_HB_SYS_H_ */
