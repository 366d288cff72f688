package wasmmem

// MinPages is the largest initial size, in pages, of a memory the module's
// binary defines (0 when it defines none), at most MaxPages. wazero reports
// only imported and exported memories, and would panic instantiating a
// memory whose initial size its allocator refuses, so a host checks this
// against the cap first. The hosts call it on modules that have compiled,
// so their sections are well formed; on a module that is not, it returns
// what it read before the damage and never panics.
func MinPages(module []byte) uint32 {
	const memorySection = 5
	var most uint32
	b := module[min(8, len(module)):] // magic and version
	for len(b) > 0 {
		id := b[0]
		size, n := uleb(b[1:])
		if n == 0 || uint64(len(b)-1-n) < size {
			return most
		}
		sec := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != memorySection {
			continue
		}
		count, n := uleb(sec)
		sec = sec[n:]
		for range count {
			if len(sec) == 0 {
				return most
			}
			flags := sec[0]
			minimum, n := uleb(sec[1:])
			if n == 0 {
				return most
			}
			most = max(most, uint32(min(minimum, MaxPages)))
			sec = sec[1+n:]
			if flags&1 != 0 { // has a maximum
				_, n := uleb(sec)
				sec = sec[n:]
			}
		}
	}
	return most
}

// uleb decodes an unsigned LEB128 number, returning it and its length (0
// when b does not hold one).
func uleb(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1
		}
	}
	return 0, 0
}
