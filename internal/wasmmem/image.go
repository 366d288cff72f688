package wasmmem

// Image is a snapshot of a linear memory that new memories start as (see
// NewFromImage). On Linux it is a sealed memfd, mapped copy-on-write into
// each memory that starts from it: a memory's pages are the image's until
// the guest writes them, so starting one copies nothing and a call pays
// only for the pages it touches. Elsewhere it is a byte slice, copied.
//
// An Image is immutable and safe for concurrent use. Close it once no
// Allocator will be made from it; memories already made keep their pages.
type Image struct {
	size uint64 // a multiple of PageSize
	img  image
}

// NewImage returns an image of b, whose length must be a multiple of
// PageSize.
func NewImage(b []byte) (*Image, error) {
	img, err := newImage(b)
	if err != nil {
		return nil, err
	}
	return &Image{size: uint64(len(b)), img: img}, nil
}

// Size is the image's length in bytes.
func (im *Image) Size() uint64 { return im.size }

// Close releases the image.
func (im *Image) Close() error { return im.img.close() }

// NewFromImage returns an Allocator like New's whose first memory starts
// with im's contents instead of zeros; im must fit in limit. Its later
// memories, if any, start with zeros.
func NewFromImage(limit uint64, im *Image) *Allocator {
	return &Allocator{limit: limit, image: im}
}

// fill makes m's first im.size bytes the image's.
func (im *Image) fill(m *linearMemory) {
	if m.mapped != nil {
		if im.img.mapInto(m.mapped[:im.size]) {
			return
		}
		im.img.copyInto(m.mapped[:im.size])
		return
	}
	m.buf = make([]byte, im.size)
	im.img.copyInto(m.buf)
}
