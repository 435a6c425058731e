package hugepage

import (
	"bufio"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

type rec struct{ a, b, c, d, e, f uint64 } // 48 bytes, not a divisor of Size

func TestMakeSmallIsPlain(t *testing.T) {
	s := Make[rec](10)
	require.Len(t, s, 10)
	require.Equal(t, 10, cap(s))
	for _, r := range s {
		require.Zero(t, r)
	}
}

func TestMakeLarge(t *testing.T) {
	n := MinBytes/48 + 12345
	s := Make[rec](n)
	require.Len(t, s, n)
	require.Equal(t, n, cap(s))
	require.Equal(t, -1, slices.IndexFunc(s, func(r rec) bool { return r != rec{} }), "the array is not zero")
	for i := range s {
		s[i].f = uint64(i)
	}
	require.Equal(t, uint64(n-1), s[n-1].f)
}

// TestMakeAdvisesHugePages reads the kernel's view of the array's memory:
// its mapping carries the huge page advice (VmFlags "hg"), and where
// transparent huge pages are not off, the mapping is eligible for them.
func TestMakeAdvisesHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux takes madvise(MADV_HUGEPAGE)")
	}
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("this kernel has no transparent huge pages: ", err)
	}
	s := Make[uint64](2 * MinBytes / 8)
	addr := uintptr(unsafe.Pointer(&s[len(s)/2]))
	flags, eligible := mappingOf(t, addr)
	require.Contains(t, strings.Fields(flags), "hg", "VmFlags of the mapping holding the array")
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	require.NoError(t, err)
	if !strings.Contains(string(mode), "[never]") {
		require.Equal(t, "1", eligible, "THPeligible of the mapping holding the array")
	}
	runtime.KeepAlive(s)
}

// mappingOf returns the VmFlags and THPeligible lines of the mapping of
// this process that holds addr, from /proc/self/smaps.
func mappingOf(t *testing.T, addr uintptr) (flags, eligible string) {
	f, err := os.Open("/proc/self/smaps")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if lo, hi, ok := rangeOf(line); ok {
			if in {
				break
			}
			in = lo <= addr && addr < hi
			continue
		}
		if !in {
			continue
		}
		if v, ok := strings.CutPrefix(line, "VmFlags:"); ok {
			flags = v
		}
		if v, ok := strings.CutPrefix(line, "THPeligible:"); ok {
			eligible = strings.TrimSpace(v)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, flags, "no mapping holds %#x", addr)
	return flags, eligible
}

// rangeOf parses the address range that starts a mapping's lines in smaps
// ("7f00-7f80 rw-p ...").
func rangeOf(line string) (lo, hi uintptr, ok bool) {
	first, _, _ := strings.Cut(line, " ")
	a, b, ok := strings.Cut(first, "-")
	if !ok {
		return 0, 0, false
	}
	x, err1 := strconv.ParseUint(a, 16, 64)
	y, err2 := strconv.ParseUint(b, 16, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uintptr(x), uintptr(y), true
}
