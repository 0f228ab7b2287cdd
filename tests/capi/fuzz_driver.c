/* A fuzz driver for libemu_rt: reads lines "OP A B C D" from stdin and makes the call each
 * names with handles, structs and sizes drawn from small tables (live, released, copied,
 * altered, NULL or made-up), printing each call's status. The test feeds it random
 * sequences and holds every status to the APIs' codes; nothing may crash the process. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "emu_rt.h"
#include "hb_dnn.h"
#include "hb_sys.h"

#define SLOTS 4

static hbSysMem mem[SLOTS];
static hbPackedDNNHandle_t packed[SLOTS];
static hbDNNHandle_t dnn[SLOTS];
static hbDNNTaskHandle_t task[SLOTS];
static char host[8192];

static void *handle_value(long pick, void *live) {
  switch (pick % 4) {
    case 0: return live;
    case 1: return NULL;
    case 2: return (void *)(uintptr_t)(0x10 * (pick + 1));
    default: return (void *)(uintptr_t)0xdeadbeef0ULL;
  }
}

static hbSysMem *mem_value(long pick, long slot) { return pick % 5 == 4 ? NULL : &mem[slot]; }

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *files[3] = {argv[1], argv[2], "/nonexistent.hbm"};
  long op, a, b, c, d;
  while (scanf("%ld %ld %ld %ld %ld", &op, &a, &b, &c, &d) == 5) {
    long s = a % SLOTS, t = b % SLOTS;
    int32_t rc = 0;
    switch (op) {
      case 0: rc = c % 2 ? hbSysAllocCachedMem(mem_value(d, s), (uint32_t)b * 61)
                         : hbSysAllocMem(mem_value(d, s), (uint32_t)b * 61); break;
      case 1: rc = hbSysFreeMem(mem_value(d, s)); break;
      case 2: rc = hbSysFlushMem(mem_value(d, s), (int32_t)(b % 4)); break;
      case 3: rc = hbSysWriteMem(mem_value(d, s), c % 3 ? host : NULL, (uint32_t)(b * 97 % 8192)); break;
      case 4: rc = hbSysReadMem(c % 3 ? host : NULL, mem_value(d, s), (uint32_t)(b * 97 % 8192)); break;
      case 5: mem[t] = mem[s]; break;
      case 6:
        if (b % 3 == 0) mem[s].virAddr = (char *)mem[s].virAddr + c % 64;
        else if (b % 3 == 1) mem[s].phyAddr += (uint64_t)(c % 3) * 4096;
        else mem[s].memSize += (uint32_t)(c % 100);
        break;
      case 7: rc = hbDNNInitializeFromFiles(d % 5 == 4 ? NULL : &packed[s], &files[b % 3],
                                            (int32_t)(c % 2)); break;
      case 8: rc = hbDNNRelease(handle_value(d, packed[s])); break;
      case 9: {
        const char **names = NULL;
        int32_t count = 0;
        rc = hbDNNGetModelNameList(&names, &count, handle_value(d, packed[s]));
        if (rc == 0 && count > 0)
          rc = hbDNNGetModelHandle(&dnn[t], handle_value(c, packed[s]),
                                   c % 7 == 6 ? "nope" : names[0]);
        break;
      }
      case 10: {
        int32_t n = 0;
        rc = b % 2 ? hbDNNGetInputCount(c % 5 == 4 ? NULL : &n, handle_value(d, dnn[s]))
                   : hbDNNGetOutputCount(&n, handle_value(d, dnn[s]));
        break;
      }
      case 11: {
        hbDNNTensorProperties p;
        rc = b % 2 ? hbDNNGetInputTensorProperties(&p, handle_value(d, dnn[s]), (int32_t)(c % 3) - 1)
                   : hbDNNGetOutputTensorProperties(&p, handle_value(d, dnn[s]), (int32_t)(c % 3) - 1);
        break;
      }
      case 12: {
        hbDNNTensor in, out;
        memset(&in, 0, sizeof in);
        memset(&out, 0, sizeof out);
        hbDNNGetInputTensorProperties(&in.properties, dnn[s], 0);
        hbDNNGetOutputTensorProperties(&out.properties, dnn[s], 0);
        in.sysMem[0] = mem[t];
        out.sysMem[0] = mem[(t + 1) % SLOTS];
        hbDNNInferCtrlParam ctrl;
        HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
        ctrl.bpuCoreId = (int32_t)(c % 4);
        ctrl.priority = (int32_t)(c * 37 % 300);
        hbDNNTensor *o = &out;
        task[s] = NULL;
        rc = hbDNNInfer(&task[s], d % 6 == 5 ? NULL : &o, &in, handle_value(d, dnn[s]), &ctrl);
        break;
      }
      case 13: rc = hbDNNWaitTaskDone(handle_value(d, task[s]), (int32_t)(c % 3) - 1); break;
      case 14: rc = hbDNNReleaseTask(handle_value(d, task[s])); break;
      default: rc = emuCpuWork((uint64_t)(c % 1000)); break;
    }
    printf("%ld %d\n", op, (int)rc);
  }
  return 0;
}
