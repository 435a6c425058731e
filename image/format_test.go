package image

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func encodeImage(t testing.TB, h Header, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	_, n, err := WriteTo(&b, h, func(w io.Writer) error { _, err := w.Write(body); return err })
	require.NoError(t, err)
	require.Equal(t, int64(b.Len()), n)
	return b.Bytes()
}

func decodeImage(data []byte) (Info, []byte, error) {
	var body []byte
	info, err := readImage(bytes.NewReader(data), int64(len(data)), func(r io.Reader) error {
		var err error
		body, err = io.ReadAll(r)
		return err
	})
	return info, body, err
}

var testHeader = Header{ClusterID: "cluster-a", Index: 4242, Term: 7, Membership: []byte("voters=1,2,3")}

func TestRoundTrip(t *testing.T) {
	for _, body := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("abc"), 100000)} {
		data := encodeImage(t, testHeader, body)
		info, got, err := decodeImage(data)
		require.NoError(t, err)
		require.Equal(t, testHeader.ClusterID, info.ClusterID)
		require.Equal(t, testHeader.Index, info.Index)
		require.Equal(t, testHeader.Term, info.Term)
		require.Equal(t, testHeader.Membership, info.Membership)
		require.Equal(t, uint16(FormatVersion), info.Version)
		require.Equal(t, len(body), len(got))
		require.True(t, bytes.Equal(body, got))
		require.Equal(t, crc32.Checksum(data[:len(data)-4], castagnoli), info.CRC)
	}
}

// Every single-bit flip anywhere in an image is detected as corruption.
func TestEveryBitFlipDetected(t *testing.T) {
	data := encodeImage(t, testHeader, []byte("kv1 3 1\nk=v\n"))
	for i := range data {
		for bit := range 8 {
			bad := bytes.Clone(data)
			bad[i] ^= 1 << bit
			_, _, err := decodeImage(bad)
			require.Error(t, err, "flip of bit %d in byte %d went unnoticed", bit, i)
			require.True(t, errors.Is(err, ErrCorrupt), "byte %d bit %d: %v", i, bit, err)
		}
	}
}

func TestCorruptionErrors(t *testing.T) {
	body := bytes.Repeat([]byte("body"), 50)
	data := encodeImage(t, testHeader, body)
	hdr, _ := encodeHeader(testHeader)
	flip := func(off int) []byte { b := bytes.Clone(data); b[off] ^= 0x10; return b }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated header"},
		{"not an image", []byte("hello, this is not an image at all"), "bad magic"},
		{"magic", flip(0), "bad magic"},
		{"version bit", flip(9), "header checksum mismatch"},
		{"header field", flip(20), "header checksum mismatch"},
		{"body", flip(len(hdr) + 10), "checksum mismatch"},
		{"trailer length", flip(len(data) - 15), "body length mismatch"},
		{"end magic", flip(len(data) - 8), "bad trailer magic"},
		{"stored crc", flip(len(data) - 1), "checksum mismatch"},
		{"truncated in header", data[:10], "truncated header"},
		{"truncated after header", data[:len(hdr)], "truncated"},
		{"truncated mid body", data[:len(hdr)+50], "trailer"},
		{"truncated by one", data[:len(data)-1], "trailer"},
		{"extended", append(bytes.Clone(data), 0), "trailer"},
		{"huge header length", func() []byte { b := bytes.Clone(data); binary.BigEndian.PutUint32(b[12:], 1<<31); return b }(), "header length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeImage(tc.data)
			require.Error(t, err)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

// withVersion re-encodes data's header with another format version and a
// valid header checksum, as a newer build would write it.
func withVersion(t testing.TB, data []byte, version uint16) []byte {
	t.Helper()
	b := bytes.Clone(data)
	binary.BigEndian.PutUint16(b[8:], version)
	restLen := int(binary.BigEndian.Uint32(b[12:]))
	end := fixedHeaderLen + restLen
	binary.BigEndian.PutUint32(b[end:], crc32.Checksum(b[:end], castagnoli))
	return b
}

func TestUnknownVersion(t *testing.T) {
	data := withVersion(t, encodeImage(t, testHeader, []byte("x")), FormatVersion+1)
	_, _, err := decodeImage(data)
	require.ErrorIs(t, err, ErrUnknownVersion)
	require.False(t, errors.Is(err, ErrCorrupt))
	require.Contains(t, err.Error(), "format version 2")
}

func TestHeaderLimits(t *testing.T) {
	_, err := encodeHeader(Header{ClusterID: strings.Repeat("x", maxClusterIDLen+1)})
	require.ErrorContains(t, err, "cluster id")
}

// The body stream given to a state is exactly the body even when the state
// stops reading early; the trailer is still checked.
func TestReadImageStateStopsEarly(t *testing.T) {
	data := encodeImage(t, testHeader, bytes.Repeat([]byte("z"), 1<<20))
	_, err := readImage(bytes.NewReader(data), int64(len(data)), func(r io.Reader) error {
		_, err := io.ReadFull(r, make([]byte, 10))
		return err
	})
	require.NoError(t, err)
	bad := bytes.Clone(data)
	bad[len(bad)/2] ^= 1
	_, err = readImage(bytes.NewReader(bad), int64(len(bad)), func(r io.Reader) error {
		return errors.New("state: garbage")
	})
	require.ErrorIs(t, err, ErrCorrupt, "a corrupt body is reported as corruption, not as the state's parse error")
}

func FuzzReadImage(f *testing.F) {
	f.Add(encodeImage(f, testHeader, []byte("kv1 1 1\nk=v\n")))
	f.Add(encodeImage(f, Header{}, nil))
	f.Add(withVersion(f, encodeImage(f, testHeader, nil), 9))
	f.Add([]byte("MTIMAGE\x00\x00\x01\x00\x00\x00\x00\x00\x05"))
	f.Add([]byte("MTIMAGE\x00\x00\x01\x00\x00\x04\x00\x00\x00")) // a header of 64 MiB, not there
	f.Fuzz(func(t *testing.T, data []byte) {
		info, body, err := decodeImage(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownVersion) {
				t.Fatalf("decode error is neither ErrCorrupt nor ErrUnknownVersion: %v", err)
			}
			return
		}
		// Whatever decodes re-encodes to the same bytes.
		again := encodeImage(t, info.Header, body)
		if !bytes.Equal(again, data) {
			t.Fatalf("decoded image re-encodes differently")
		}
	})
}

// TestHeaderDecoderAllocatesByItsInput: a 16-byte prefix whose length field
// says the header goes on for the largest length allowed is refused as
// corrupt (truncated) after allocating in proportion to the bytes there
// are, not to the length it claims.
func TestHeaderDecoderAllocatesByItsInput(t *testing.T) {
	prefix := binary.BigEndian.AppendUint16(append([]byte(nil), fileMagic[:]...), FormatVersion)
	prefix = binary.BigEndian.AppendUint16(prefix, 0)
	prefix = binary.BigEndian.AppendUint32(prefix, maxVarHeaderLen)
	require.Len(t, prefix, fixedHeaderLen)
	var err error
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err = decodeHeader(bytes.NewReader(prefix))
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "bytes allocated decoding a %d-byte prefix", len(prefix))
}
