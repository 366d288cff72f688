// Command guest is an adversarial WASI (wasip1) program for the sandbox
// tests. argv[1] picks what it does; every mode reports on stdout/stderr so
// the tests can assert what the sandbox allowed.
//
// Rebuild (from the repository root) after changing it, then update
// guestSHA256 in sandbox_test.go:
//
//	GOOS=wasip1 GOARCH=wasm go build -trimpath -ldflags="-s -w" -o internal/sandbox/testdata/guest.wasm ./internal/sandbox/testdata/guest
//	sha256sum internal/sandbox/testdata/guest.wasm
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: guest MODE [ARG]")
	}
	arg := ""
	if len(os.Args) > 2 {
		arg = os.Args[2]
	}
	switch os.Args[1] {
	case "echo":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fail("echo: %v", err)
		}
	case "upper":
		upper()
	case "loop":
		loop()
	case "sleep":
		time.Sleep(time.Hour)
	case "bomb":
		bomb()
	case "hog":
		hog()
	case "fdbomb":
		fdbomb(arg)
	case "fill":
		fill(arg)
	case "files":
		files(arg)
	case "churn":
		churn(arg)
	case "sparse":
		sparse(arg, false)
	case "stretch":
		sparse(arg, true)
	case "passwd":
		b, err := os.ReadFile("/etc/passwd")
		if err != nil {
			fail("passwd: %v", err)
		}
		os.Stdout.Write(b)
	case "cat":
		b, err := os.ReadFile(arg)
		if err != nil {
			fail("cat: %v", err)
		}
		os.Stdout.Write(b)
	case "ls":
		es, err := os.ReadDir(arg)
		if err != nil {
			fail("ls: %v", err)
		}
		for _, e := range es {
			fmt.Println(e.Name())
		}
	case "escape":
		escape(arg)
	case "fsops":
		fsops(arg)
	case "write":
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fail("write: %v", err)
		}
		if err := os.WriteFile(arg, b, 0o644); err != nil {
			fail("write: %v", err)
		}
		fmt.Println("wrote", arg)
	case "flood":
		flood()
	case "exit3":
		fmt.Fprintln(os.Stderr, "exit3: something went wrong")
		os.Exit(3)
	case "leave":
		leave(arg)
	case "env":
		for _, kv := range os.Environ() {
			fmt.Println(kv)
		}
	case "net":
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+arg, 2*time.Second)
		if err != nil {
			fmt.Println("dial failed:", err)
			return
		}
		c.Close()
		fmt.Println("dial succeeded")
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	os.Exit(1)
}

// upper is the shape of a real native tool: JSON arguments on stdin, an MCP
// tools/call result on stdout.
func upper() {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("upper: %v", err)
	}
	type content struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	out := struct {
		Content []content `json:"content"`
	}{Content: []content{{Type: "text", Text: strings.ToUpper(in.Text)}}}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fail("upper: %v", err)
	}
}

var sink uint64

func loop() {
	for i := uint64(0); ; i++ {
		sink += i
	}
}

var hoard [][]byte

func bomb() {
	for {
		b := make([]byte, 16<<20)
		for i := range b {
			b[i] = byte(i) // touch it so nothing is lazily skipped
		}
		hoard = append(hoard, b)
	}
}

// hog is a faster memory bomb: it commits memory by touching one byte
// per 4 KiB page rather than every byte.
func hog() {
	for {
		b := make([]byte, 16<<20)
		for i := 0; i < len(b); i += 4 << 10 {
			b[i] = 1
		}
		hoard = append(hoard, b)
	}
}

// fdbomb opens the directory dir again and again without closing it, as a
// guest that exhausted the host's descriptors did, and keeps trying after
// opens fail. It reports the first failure on stdout.
func fdbomb(dir string) {
	var open []*os.File
	reported := false
	for range 1_000_000 {
		f, err := os.Open(dir)
		if err != nil {
			if !reported {
				fmt.Printf("fdbomb: %d open, then: %v\n", len(open), err)
				reported = true
			}
			continue
		}
		open = append(open, f)
	}
	fmt.Printf("fdbomb: %d open\n", len(open))
}

// fill writes 1 GiB into a new file in dir in 1 MiB pieces, ignoring
// failures as a careless tool would, and reports the first failure on
// stdout. Calls filling the same directory at once write different files.
func fill(dir string) {
	f, err := os.CreateTemp(dir, "fill-")
	if err != nil {
		fail("fill: %v", err)
	}
	chunk := make([]byte, 1<<20)
	reported := false
	for range 1024 {
		if _, err := f.Write(chunk); err != nil && !reported {
			fmt.Println("fill: write:", err)
			reported = true
		}
	}
	f.Close()
}

// files creates 20,000 empty files in dir, ignoring failures, and reports
// the first failure on stdout.
func files(dir string) {
	reported := false
	for i := range 20_000 {
		f, err := os.Create(fmt.Sprintf("%s/f%05d", dir, i))
		if err != nil {
			if !reported {
				fmt.Println("files:", err)
				reported = true
			}
			continue
		}
		f.Close()
	}
}

// churn writes, replaces, links and removes files in dir a hundred times,
// never holding more than two entries and 2 KiB at once.
func churn(dir string) {
	kib := make([]byte, 1<<10)
	a, b, l, d := dir+"/a", dir+"/b", dir+"/l", dir+"/d"
	for i := range 100 {
		for _, step := range []func() error{
			func() error { return os.WriteFile(a, kib, 0o644) },
			func() error { return os.WriteFile(a, kib, 0o644) }, // truncates first
			func() error { return os.Link(a, l) },
			func() error { return os.Remove(l) },
			func() error { return os.WriteFile(b, kib, 0o644) },
			func() error { return os.Rename(b, a) }, // replaces a
			func() error { return os.Remove(a) },
			func() error { return os.Mkdir(d, 0o755) },
			func() error { return os.Symlink("d", l) },
			func() error { return os.Remove(l) },
			func() error { return os.Remove(d) },
		} {
			if err := step(); err != nil {
				fail("churn: round %d: %v", i, err)
			}
		}
	}
	fmt.Println("churn: ok")
}

// sparse tries to take 1 GiB without writing it: one byte written at
// 1 GiB into an empty file, or (stretch) the file truncated up to 1 GiB.
func sparse(dir string, stretch bool) {
	f, err := os.Create(dir + "/sparse")
	if err != nil {
		fail("sparse: %v", err)
	}
	if stretch {
		err = f.Truncate(1 << 30)
	} else {
		_, err = f.WriteAt([]byte("x"), 1<<30)
	}
	fmt.Println("sparse:", err)
	f.Close()
}

// escape tries to leave the first mount (preopened as fd 3) with a raw
// "../" path, which Go's os package would clean away, and then to read
// through a symlink whose guest path is given.
func escape(link string) {
	fd, err := syscall.Openat(3, "../../../../etc/passwd", syscall.O_RDONLY, 0)
	if err == nil {
		syscall.Close(fd)
		fmt.Println("dotdot: opened")
	} else {
		fmt.Println("dotdot: denied:", err)
	}
	if link == "" {
		return
	}
	b, err := os.ReadFile(link)
	if err == nil {
		fmt.Printf("symlink: read %q\n", b)
	} else {
		fmt.Println("symlink: denied:", err)
	}
}

// flood writes 100 MiB to stdout, ignoring write errors as a careless tool
// would, and then hangs: only the sandbox stopping it ends the call early.
func flood() {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'x'
	}
	failed := 0
	for range (100 << 20) / len(chunk) {
		if _, err := os.Stdout.Write(chunk); err != nil {
			failed++
		}
	}
	fmt.Fprintf(os.Stderr, "flood: wrote 100 MiB, %d writes failed; hanging\n", failed)
	time.Sleep(time.Hour)
}

// fsops exercises every path operation on a writable directory, including
// ones that try to leave it, and prints one line per step.
func fsops(dir string) {
	step := func(name string, err error) {
		if err != nil {
			if e := errors.Unwrap(err); e != nil {
				err = e // drop the *PathError's repetition of the path
			}
			fmt.Printf("%s: %v\n", name, err)
		} else {
			fmt.Printf("%s: ok\n", name)
		}
	}
	sub := dir + "/sub"
	step("mkdir", os.Mkdir(sub, 0o755))
	step("mkdir again", os.Mkdir(sub, 0o755))
	step("write", os.WriteFile(sub+"/a", []byte("A"), 0o644))
	f, err := os.OpenFile(sub+"/a", os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("ppend")
		f.Close()
	}
	step("append", err)
	step("truncate", os.Truncate(sub+"/a", 5))
	step("rename", os.Rename(sub+"/a", sub+"/b"))
	step("symlink", os.Symlink("b", sub+"/c"))
	target, err := os.Readlink(sub + "/c")
	step("readlink "+target, err)
	b, err := os.ReadFile(sub + "/c")
	step("read via link "+string(b), err)
	now := time.Now()
	step("chtimes", os.Chtimes(sub+"/b", now, now))
	step("symlink absolute", os.Symlink("/etc/passwd", sub+"/abs"))
	step("symlink out", os.Symlink("../../outside/secret.txt", sub+"/out"))
	_, err = os.ReadFile(sub + "/out")
	step("read via link out", err)
	step("rename out", os.Rename(dir+"/hello.txt", dir+"/dir-link/stolen.txt"))
	step("remove link out", os.Remove(sub+"/out"))
	step("rmdir non-empty", syscall.Rmdir(sub))
	step("unlink dir", syscall.Unlink(sub))
	step("remove", os.Remove(sub+"/c"))
	step("remove", os.Remove(sub+"/b"))
	step("rmdir", os.Remove(sub))
	_, err = os.Stat(sub)
	step("stat gone", err)
}

// calls counts the calls this instance has served: always 1 in a fresh one.
var calls int

// leave reports what an earlier call could have left in this instance (a
// package variable, an environment variable, an open descriptor, the file
// dir/left it keeps open), then leaves all of them behind for the next:
// stdin names what it leaves.
func leave(dir string) {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("leave: %v", err)
	}
	calls++
	open := 0
	for fd := 3; fd < 64; fd++ {
		var st syscall.Stat_t
		if syscall.Fstat(fd, &st) == nil {
			open++
		}
	}
	fmt.Printf("stdin=%s calls=%d env=%q open=%d\n", in, calls, os.Getenv("LEFT_BEHIND"), open)
	os.Setenv("LEFT_BEHIND", string(in))
	f, err := os.OpenFile(dir+"/left", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fail("leave: %v", err)
	}
	fmt.Fprintf(f, "%s\n", in)
	leftOpen = f
}

var leftOpen *os.File
