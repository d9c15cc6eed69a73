// Memory that host code may touch only inside a ProtectedAccess scope.
//
// cuda-sim's device memory comes from here, so that host code which reads or writes "device"
// memory crashes on the CPU as it does on a GPU (SIGSEGV for a load or store; EFAULT, "Bad
// address", from a system call such as a socket write), while the simulated kernels and copies
// — the only code a GPU lets near its memory — open a scope and run.
//
// One range of address space is reserved for it, and blocks are carved out of that range.
// Where the CPU and kernel have memory protection keys (x86 PKU, Linux >= 4.9), the range has a
// key of its own and access is per thread: a scope opens the range for its own thread only, so
// a communicator thread's memcpy on device memory faults even while the engine thread is inside
// a kernel. Elsewhere (or with DSCPP_PROTECTED_MEMORY=mprotect) the range is PROT_NONE and is
// opened for the whole process while any thread is in a scope: a host access outside every scope
// still faults, one that overlaps another thread's scope is missed.
#pragma once

#include <cstddef>

namespace dscpp {

// Page-aligned and zero-filled; nullptr when the reserved range is used up. Thread-safe.
void* protected_allocate(size_t bytes);
// Returns the pages to the system (they read as zero when reused).
void protected_release(void* ptr, size_t bytes);
bool protected_contains(const void* ptr);
// "protection keys (per thread)" or "mprotect (whole process)": for logs and tests.
const char* protected_mechanism();

// While one exists on a thread, that thread (or, with mprotect, every thread) may read and
// write protected memory. Nests. Cheap with protection keys (a register write, no system call).
class ProtectedAccess {
 public:
  ProtectedAccess();
  ~ProtectedAccess();
  ProtectedAccess(const ProtectedAccess&) = delete;
  ProtectedAccess& operator=(const ProtectedAccess&) = delete;

  // Whether the calling thread is inside a scope: a thread pool carries this into the workers
  // that run a share of the caller's loop.
  static bool open_here();
  // A new thread inherits its creator's protection-key rights; a pool worker that may have been
  // started from inside a scope calls this first, so that it starts closed.
  static void close_this_thread();
};

}  // namespace dscpp
