/* emu_rt.h: emu's own additions for programs run against libemu_rt (not board APIs).
 *
 * A program's threads live in simulated time: the code between two runtime calls takes
 * none unless the program declares what it costs with emuCpuWork. clock_gettime on
 * CLOCK_MONOTONIC (and CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME) gives the calling thread's
 * simulated time, so a board program's latency measurements need no change; emuNowPs gives
 * the same time in picoseconds. Guard these calls with #ifdef EMU_RT on code that also
 * builds for the board.
 */
#ifndef EMU_RT_H_
#define EMU_RT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_RT 1
#define EMU_RT_SUCCESS 0
#define EMU_RT_INVALID_ARGUMENT -6900001
#define EMU_RT_WRONG_THREAD -6900002

/* The calling thread's simulated time in picoseconds (-1 outside the program's threads). */
int64_t emuNowPs(void);

/* Let `cycles` A55 cycles of CPU work pass on a core of the cluster (queued behind other
 * threads' work when every core is busy), at the configured CPU clock. */
int32_t emuCpuWork(uint64_t cycles);

#ifdef __cplusplus
}
#endif

#endif /* EMU_RT_H_ */
