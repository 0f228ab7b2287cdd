// A C++ program: std::thread workers, a task-done callback that calls the runtime and starts
// a thread, a thread started behind the library's back (libc's pthread_create, which the
// runtime cannot place in the session), and declared CPU work. Prints what it saw; the test
// holds it to what the API documents.
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <pthread.h>
#include <thread>
#include <vector>

#include "emu_rt.h"
#include "hb_dnn.h"
#include "hb_sys.h"

static int32_t callback_status = 1;
static int64_t callback_ps = -1;
static int32_t callback_flush = 1;
static int32_t helper_rc = 1;
static int32_t stranger_rc = 0;
static hbSysMem callback_mem;

static void *helper(void *) {
  hbSysMem mem;
  helper_rc = hbSysAllocMem(&mem, 64);
  if (helper_rc == 0) helper_rc = hbSysFreeMem(&mem);
  return nullptr;
}

static void *stranger(void *) {
  hbSysMem mem;
  stranger_rc = hbSysAllocMem(&mem, 64);
  return nullptr;
}

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*join_fn)(pthread_t, void **);

static void on_done(hbDNNTaskHandle_t, int32_t status, void *userdata) {
  callback_status = status;
  callback_ps = emuNowPs();
  callback_flush = hbSysFlushMem(static_cast<hbSysMem *>(userdata), HB_SYS_MEM_CACHE_INVALIDATE);
  pthread_t t;
  if (pthread_create(&t, nullptr, helper, nullptr) == 0) pthread_join(t, nullptr);
}

static int infer_once(hbDNNHandle_t dnn, bool with_callback, int64_t *latency_ps) {
  hbDNNTensor input, output;
  std::memset(&input, 0, sizeof input);
  std::memset(&output, 0, sizeof output);
  if (hbDNNGetInputTensorProperties(&input.properties, dnn, 0) ||
      hbDNNGetOutputTensorProperties(&output.properties, dnn, 0) ||
      hbSysAllocCachedMem(&input.sysMem[0], input.properties.alignedByteSize) ||
      hbSysAllocCachedMem(&output.sysMem[0], output.properties.alignedByteSize))
    return 1;
  hbDNNInferCtrlParam ctrl;
  HB_DNN_INITIALIZE_INFER_CTRL_PARAM(&ctrl);
  hbDNNTaskHandle_t task = nullptr;
  hbDNNTensor *out = &output;
  int64_t start = emuNowPs();
  if (hbDNNInfer(&task, &out, &input, dnn, &ctrl)) return 2;
  if (with_callback) {
    callback_mem = output.sysMem[0];
    if (hbDNNSetTaskDoneCb(task, on_done, &callback_mem)) return 3;
  }
  if (hbDNNWaitTaskDone(task, 0)) return 4;
  *latency_ps = emuNowPs() - start;
  hbDNNReleaseTask(task);
  hbSysFreeMem(&input.sysMem[0]);
  hbSysFreeMem(&output.sysMem[0]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  hbPackedDNNHandle_t packed = nullptr;
  const char *file = argv[1];
  const char **names = nullptr;
  int32_t count = 0;
  hbDNNHandle_t dnn = nullptr;
  if (hbDNNInitializeFromFiles(&packed, &file, 1) ||
      hbDNNGetModelNameList(&names, &count, packed) ||
      hbDNNGetModelHandle(&dnn, packed, names[0]))
    return 1;
  int64_t alone = 0;
  int rc = infer_once(dnn, true, &alone);
  void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  create_fn libc_create = libc ? (create_fn)dlsym(libc, "pthread_create") : nullptr;
  join_fn libc_join = libc ? (join_fn)dlsym(libc, "pthread_join") : nullptr;
  pthread_t foreign;
  if (libc_create && libc_join && libc_create(&foreign, nullptr, stranger, nullptr) == 0)
    libc_join(foreign, nullptr);
  int64_t before = emuNowPs();
  int32_t work = emuCpuWork(1500000);  // 1 ms at 1.5 GHz
  std::printf("cpu work rc %d took %lld ps\n", work,
              static_cast<long long>(emuNowPs() - before));
  std::vector<int64_t> latency(4, 0);
  std::vector<int> codes(4, -1);
  std::vector<std::thread> workers;
  for (int k = 0; k < 4; ++k)
    workers.emplace_back([&, k] { codes[k] = infer_once(dnn, false, &latency[k]); });
  for (auto &w : workers) w.join();
  for (int k = 0; k < 4; ++k)
    std::printf("worker %d rc %d latency %lld\n", k, codes[k],
                static_cast<long long>(latency[k]));
  std::printf("alone %lld\n", static_cast<long long>(alone));
  // the callback's thread ran while the main thread was blocked (emuCpuWork, the joins)
  std::printf("callback rc %d status %d flush %d helper %d stranger %d at_or_before_wait %d\n",
              rc, callback_status, callback_flush, helper_rc, stranger_rc,
              callback_ps > 0 && callback_ps <= emuNowPs() ? 1 : 0);

  return hbDNNRelease(packed);
}
