// Preloaded into a program run under valgrind by Benchmarks/callgrind.sh, and nowhere else.
//
// An async Swift program's main thread ends in libdispatch's dispatch_main(), whose signal thread waits in
// sigsuspend() on a mask that is a `static const` — read-only memory. valgrind (3.19 in Debian 12, and 3.24)
// removes its own signals from the mask of an rt_sigsuspend *in place*, in the program's memory, and so dies of
// its own SIGSEGV at the program's first thread. This sigsuspend() hands the kernel a writable copy of the mask;
// the program's behaviour is unchanged.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

int sigsuspend(const sigset_t *mask) {
  sigset_t copy = *mask;
  return (int)syscall(SYS_rt_sigsuspend, &copy, sizeof(unsigned long));
}
