package hugepage

import "syscall"

// advise asks the kernel to back mem (whole huge pages) with huge pages.
// It fails where transparent huge pages are not built in (EINVAL); the
// memory is then the same, in small pages.
func advise(mem []byte) { _ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE) }
