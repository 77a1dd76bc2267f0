package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	berrors "go.etcd.io/bbolt/errors"
)

// bbolt's on-disk format (go.etcd.io/bbolt/internal/common), as far as
// preflight reads it. bbolt writes its structs in the machine's byte order.
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	boltMetaSize       = 64 // magic, version, pageSize, flags u32; root, sequence, freelist, pgid, txid, checksum u64
	boltBranchFlag     = 0x01
	boltLeafFlag       = 0x02
	boltFreelistFlag   = 0x10
	boltNoFreelist     = ^uint64(0)
	boltElementSize    = 16   // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	boltBucketFlag     = 0x01 // leaf element flag: the value is a bucket header (root, sequence u64)
	boltMaxDepth       = 64   // deeper trees or bucket nesting are damage
)

// boltMeta is what preflight needs from a meta page.
type boltMeta struct {
	pageSize        uint32
	root, freelist  uint64
	highWater, txid uint64 // highWater: first page id past the data
	valid           error  // nil if bbolt would accept this meta
}

// readMeta decodes and validates (as bbolt's Meta.Validate does) the meta
// page at the start of page.
func readMeta(page []byte) boltMeta {
	if len(page) < boltPageHeaderSize+boltMetaSize {
		return boltMeta{valid: berrors.ErrInvalid}
	}
	b := page[boltPageHeaderSize : boltPageHeaderSize+boltMetaSize]
	ne := binary.NativeEndian
	m := boltMeta{
		pageSize:  ne.Uint32(b[8:]),
		root:      ne.Uint64(b[16:]),
		freelist:  ne.Uint64(b[32:]),
		highWater: ne.Uint64(b[40:]),
		txid:      ne.Uint64(b[48:]),
	}
	h := fnv.New64a()
	_, _ = h.Write(b[:56])
	switch {
	case ne.Uint32(b[0:]) != boltMagic:
		m.valid = berrors.ErrInvalid
	case ne.Uint32(b[4:]) != boltVersion:
		m.valid = berrors.ErrVersionMismatch
	case ne.Uint64(b[56:]) != h.Sum64():
		m.valid = berrors.ErrChecksum
	}
	return m
}

// readAt reads len(buf) bytes at off; a short read at the end of the file
// returns the bytes read.
func readAt(f *os.File, buf []byte, off int64) ([]byte, error) {
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return buf[:n], nil
}

// preflight checks, with plain reads, what bbolt trusts when it maps the
// file: a valid meta page, a file long enough for the pages the meta claims,
// a freelist page whose header stays inside the file, and a tree of pages
// that stays inside the file and has no cycles. Damage there makes bbolt
// fault on the mapping (a truncated file), panic, allocate without bound,
// loop forever or overflow the stack, none of which can be recovered
// cleanly. It follows bbolt's own choice of page size and meta page. An empty
// file passes read-write (bbolt initialises it) and is damage read-only. Errors about the content wrap one of
// bbolt's ErrInvalid, ErrChecksum or ErrVersionMismatch, or ErrCorrupt;
// others are I/O errors.
func preflight(f *os.File, readOnly bool) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	if size == 0 {
		if readOnly {
			return fmt.Errorf("%w: file is empty", ErrCorrupt)
		}
		return nil
	}

	// The page size: from meta 0, else from meta 1 found at the page sizes
	// bbolt tries (1 KiB to 16 MiB).
	buf := make([]byte, 4096)
	page, err := readAt(f, buf, 0)
	if err != nil {
		return err
	}
	m0 := readMeta(page)
	pageSize := int64(m0.pageSize)
	if m0.valid != nil {
		pageSize = 0
		for i := 0; i <= 14 && pageSize == 0; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			if page, err = readAt(f, buf, pos); err != nil {
				return err
			}
			if m := readMeta(page); m.valid == nil {
				pageSize = int64(m.pageSize)
			}
		}
		if pageSize == 0 {
			return fmt.Errorf("no valid meta page: %w", m0.valid)
		}
	}
	if pageSize < 1024 || pageSize > 1<<24 || pageSize&(pageSize-1) != 0 {
		return fmt.Errorf("page size %d: %w", pageSize, berrors.ErrInvalid)
	}
	if size < 2*pageSize {
		return fmt.Errorf("%w: file has %d bytes, less than two pages of %d", ErrCorrupt, size, pageSize)
	}

	// The meta page bbolt will use: the valid one with the higher txid.
	page, err = readAt(f, make([]byte, boltPageHeaderSize+boltMetaSize), pageSize)
	if err != nil {
		return err
	}
	m1 := readMeta(page)
	if m0.valid == nil && m0.pageSize != uint32(pageSize) {
		m0.valid = berrors.ErrInvalid
	}
	if m1.valid == nil && m1.pageSize != uint32(pageSize) {
		m1.valid = berrors.ErrInvalid
	}
	m := m0
	if (m1.txid > m0.txid && m1.valid == nil) || m0.valid != nil {
		m = m1
	}
	if m.valid != nil {
		return fmt.Errorf("both meta pages invalid: %w", m.valid)
	}

	pages := uint64(size / pageSize)
	switch {
	case m.highWater < 3 || m.highWater > pages:
		return fmt.Errorf("%w: truncated: file has %d pages, its meta page needs %d", ErrCorrupt, pages, m.highWater)
	case m.root < 2 || m.root >= m.highWater:
		return fmt.Errorf("%w: root page %d outside the file's %d pages", ErrCorrupt, m.root, m.highWater)
	}
	w := &walker{f: f, pageSize: pageSize, highWater: m.highWater, seen: map[uint64]bool{}}
	if err := w.tree(m.root, 0); err != nil {
		return err
	}
	switch {
	case m.freelist == boltNoFreelist:
		return nil // bbolt rebuilds the freelist by scanning the tree
	case m.freelist < 2 || m.freelist >= m.highWater:
		return fmt.Errorf("%w: freelist page %d outside the file's %d pages", ErrCorrupt, m.freelist, m.highWater)
	}
	hdr, err := readAt(f, make([]byte, boltPageHeaderSize+8), int64(m.freelist)*pageSize)
	if err != nil {
		return err
	}
	if len(hdr) < boltPageHeaderSize+8 {
		return fmt.Errorf("%w: freelist page %d cut short", ErrCorrupt, m.freelist)
	}
	ne := binary.NativeEndian
	flags, count, overflow := ne.Uint16(hdr[8:]), uint64(ne.Uint16(hdr[10:])), uint64(ne.Uint32(hdr[12:]))
	first := uint64(0)
	if count == 0xFFFF { // the real count is in the first element
		count, first = ne.Uint64(hdr[16:]), 1
	}
	capacity := ((overflow+1)*uint64(pageSize) - boltPageHeaderSize) / 8
	switch {
	case flags != boltFreelistFlag:
		return fmt.Errorf("%w: page %d is not a freelist page (flags %#x)", ErrCorrupt, m.freelist, flags)
	case m.freelist+overflow >= m.highWater:
		return fmt.Errorf("%w: freelist page %d overflows past the file's %d pages", ErrCorrupt, m.freelist, m.highWater)
	case count > capacity || first+count > capacity:
		return fmt.Errorf("%w: freelist page %d claims %d entries, room for %d", ErrCorrupt, m.freelist, count, capacity)
	}
	return nil
}

// walker reads the page tree of a bbolt file with plain reads, checking that
// every page and element lies inside the file and that no page is reached
// twice (which also rules out cycles).
type walker struct {
	f         *os.File
	pageSize  int64
	highWater uint64
	seen      map[uint64]bool
}

// page reads page id with its overflow pages.
func (w *walker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.highWater {
		return nil, fmt.Errorf("%w: page %d outside the file's %d pages", ErrCorrupt, id, w.highWater)
	}
	hdr, err := readAt(w.f, make([]byte, boltPageHeaderSize), int64(id)*w.pageSize)
	if err != nil {
		return nil, err
	}
	if len(hdr) < boltPageHeaderSize {
		return nil, fmt.Errorf("%w: page %d cut short", ErrCorrupt, id)
	}
	overflow := uint64(binary.NativeEndian.Uint32(hdr[12:]))
	if overflow >= w.highWater-id {
		return nil, fmt.Errorf("%w: page %d overflows past the file's %d pages", ErrCorrupt, id, w.highWater)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("%w: page %d reached twice", ErrCorrupt, i)
		}
		w.seen[i] = true
	}
	p, err := readAt(w.f, make([]byte, int64(overflow+1)*w.pageSize), int64(id)*w.pageSize)
	if err != nil {
		return nil, err
	}
	if int64(len(p)) < int64(overflow+1)*w.pageSize {
		return nil, fmt.Errorf("%w: page %d cut short", ErrCorrupt, id)
	}
	return p, nil
}

// tree checks the branch or leaf page id and everything under it.
func (w *walker) tree(id uint64, depth int) error {
	if depth > boltMaxDepth {
		return fmt.Errorf("%w: page tree deeper than %d", ErrCorrupt, boltMaxDepth)
	}
	p, err := w.page(id)
	if err != nil {
		return err
	}
	flags := binary.NativeEndian.Uint16(p[8:])
	if flags == boltLeafFlag {
		return w.leaf(p, id, depth)
	}
	if flags != boltBranchFlag {
		return fmt.Errorf("%w: page %d is neither branch nor leaf (flags %#x)", ErrCorrupt, id, flags)
	}
	n, err := elements(p, id)
	if err != nil {
		return err
	}
	for i := range n {
		e := p[boltPageHeaderSize+i*boltElementSize:]
		pos, ksize := uint64(binary.NativeEndian.Uint32(e[0:])), uint64(binary.NativeEndian.Uint32(e[4:]))
		if uint64(boltPageHeaderSize+i*boltElementSize)+pos+ksize > uint64(len(p)) {
			return fmt.Errorf("%w: page %d element %d outside the page", ErrCorrupt, id, i)
		}
		if err := w.tree(binary.NativeEndian.Uint64(e[8:]), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// leaf checks the leaf page p (page id, or an inline bucket's page when id
// is 0) and the buckets it holds.
func (w *walker) leaf(p []byte, id uint64, depth int) error {
	if depth > boltMaxDepth {
		return fmt.Errorf("%w: buckets nested deeper than %d", ErrCorrupt, boltMaxDepth)
	}
	n, err := elements(p, id)
	if err != nil {
		return err
	}
	for i := range n {
		off := uint64(boltPageHeaderSize + i*boltElementSize)
		e := p[off:]
		flags := binary.NativeEndian.Uint32(e[0:])
		pos, ksize, vsize := uint64(binary.NativeEndian.Uint32(e[4:])), uint64(binary.NativeEndian.Uint32(e[8:])), uint64(binary.NativeEndian.Uint32(e[12:]))
		end := off + pos + ksize + vsize
		if end > uint64(len(p)) {
			return fmt.Errorf("%w: page %d element %d outside the page", ErrCorrupt, id, i)
		}
		if flags&boltBucketFlag == 0 {
			continue
		}
		v := p[off+pos+ksize : end]
		if len(v) < 16 {
			return fmt.Errorf("%w: page %d element %d: bucket header cut short", ErrCorrupt, id, i)
		}
		if root := binary.NativeEndian.Uint64(v); root != 0 {
			err = w.tree(root, depth+1)
		} else if inline := v[16:]; len(inline) < boltPageHeaderSize || binary.NativeEndian.Uint16(inline[8:]) != boltLeafFlag {
			err = fmt.Errorf("%w: page %d element %d: inline bucket is not a leaf", ErrCorrupt, id, i)
		} else {
			err = w.leaf(inline, 0, depth+1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// elements returns the element count of page p after checking that the
// elements fit in it.
func elements(p []byte, id uint64) (int, error) {
	n := int(binary.NativeEndian.Uint16(p[10:]))
	if boltPageHeaderSize+n*boltElementSize > len(p) {
		return 0, fmt.Errorf("%w: page %d claims %d elements, more than fit", ErrCorrupt, id, n)
	}
	return n, nil
}
