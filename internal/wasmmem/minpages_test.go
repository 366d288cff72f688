package wasmmem

import (
	"bytes"
	"testing"
)

// header is a module's magic and version.
var header = []byte{0, 'a', 's', 'm', 1, 0, 0, 0}

func leb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func section(id byte, body ...[]byte) []byte {
	joined := bytes.Join(body, nil)
	return append(append([]byte{id}, leb(uint64(len(joined)))...), joined...)
}

func module(sections ...[]byte) []byte {
	return append(append([]byte(nil), header...), bytes.Join(sections, nil)...)
}

func TestMinPages(t *testing.T) {
	custom := section(0, leb(4), []byte("name"), []byte{1, 2, 3})
	tests := []struct {
		name   string
		module []byte
		want   uint32
	}{
		{"empty", nil, 0},
		{"header only", header, 0},
		{"shorter than a header", header[:5], 0},
		{"no memory section", module(custom, section(1, leb(0))), 0},
		{"one memory", module(section(5, leb(1), []byte{0}, leb(17))), 17},
		{"after other sections", module(custom, section(1, leb(0)), section(5, leb(1), []byte{0}, leb(3))), 3},
		{"with a maximum", module(section(5, leb(1), []byte{1}, leb(2), leb(100))), 2},
		{"largest of several", module(section(5, leb(3), []byte{1}, leb(2), leb(9), []byte{0}, leb(40), []byte{0}, leb(7))), 40},
		{"two memory sections", module(section(5, leb(1), []byte{0}, leb(5)), section(5, leb(1), []byte{0}, leb(6))), 6},
		{"minimum past wasm32", module(section(5, leb(1), []byte{0}, leb(1<<40))), MaxPages},
		{"minimum of 2^64-1", module(section(5, leb(1), []byte{0}, leb(^uint64(0)))), MaxPages},
		// Eleven continuation bytes: longer than any uint64's LEB128.
		{"endless LEB128 minimum", module(section(5, leb(1), []byte{0}, bytes.Repeat([]byte{0xff}, 11))), 0},
		{"endless LEB128 section size", append(module(), 5, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), 0},
		{"section size past the end", append(module(), 5, 100, 1, 0, 3), 0},
		{"section size of 2^64-1", append(append(module(), 5), leb(^uint64(0))...), 0},
		{"truncated after the id", append(module(), 5), 0},
		{"memory count past its entries", module(section(5, leb(1<<62), []byte{0}, leb(4))), 4},
		{"truncated entry", module(section(5, leb(2), []byte{0}, leb(4), []byte{0})), 4},
		{"truncated maximum", module(section(5, leb(1), []byte{1}, leb(8))), 8},
		{"good memory before a damaged section", append(module(section(5, leb(1), []byte{0}, leb(12))), 11, 50), 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MinPages(tt.module); got != tt.want {
				t.Errorf("MinPages = %d, want %d", got, tt.want)
			}
		})
	}
}

// FuzzMinPages holds MinPages to never panicking and never passing
// MaxPages, whatever the bytes.
func FuzzMinPages(f *testing.F) {
	f.Add(module(section(5, leb(1), []byte{1}, leb(2), leb(9))))
	f.Add(append(module(), 5, 0xff, 0xff))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got := MinPages(b); got > MaxPages {
			t.Fatalf("MinPages = %d, past MaxPages", got)
		}
	})
}
