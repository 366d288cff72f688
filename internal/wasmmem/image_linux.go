package wasmmem

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// image is a sealed memfd holding the bytes.
type image struct{ f *os.File }

func newImage(b []byte) (image, error) {
	fd, err := unix.MemfdCreate("airlock-wasm-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return image{}, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-wasm-image")
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return image{}, fmt.Errorf("memfd write: %w", err)
	}
	// Nothing may change it now: every memory made from it sees these
	// bytes. Private mappings stay allowed.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		_ = f.Close()
		return image{}, fmt.Errorf("memfd seal: %w", err)
	}
	return image{f: f}, nil
}

func (im image) close() error { return im.f.Close() }

// mapInto maps the image copy-on-write over dst (page-aligned, within a
// mapping of its own), or reports that it could not.
func (im image) mapInto(dst []byte) bool {
	if len(dst) == 0 {
		return true
	}
	p, err := unix.MmapPtr(int(im.f.Fd()), 0, unsafe.Pointer(&dst[0]), uintptr(len(dst)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED)
	return err == nil && p == unsafe.Pointer(&dst[0])
}

func (im image) copyInto(dst []byte) {
	for off := 0; off < len(dst); {
		n, err := im.f.ReadAt(dst[off:], int64(off))
		if n <= 0 || err != nil && off+n < len(dst) {
			return // cannot happen with a sealed memfd of this size
		}
		off += n
	}
}
