package expr

import (
	"errors"
	"testing"
)

func TestCompileString(t *testing.T) {
	for _, tc := range []struct {
		src     string
		args    map[string]any
		want    string
		compile error // errors.Is
		evalErr bool
	}{
		{src: `"file:" + args.path`, args: map[string]any{"path": "/a"}, want: "file:/a"},
		{src: `args.path`, args: map[string]any{"path": "/b"}, want: "/b"}, // dyn: checked when evaluated
		{src: `args.path`, args: map[string]any{"path": 3.0}, evalErr: true},
		{src: `"repo:" + call.task`, want: "repo:t1"},
		{src: `args.n > 1`, compile: ErrNotString},
		{src: `result.path`, compile: ErrUndeclaredReference},
	} {
		p, err := CompileString(Capture, tc.src)
		if tc.compile != nil {
			if !errors.Is(err, tc.compile) {
				t.Errorf("%s: compile error %v, want %v", tc.src, err, tc.compile)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		args := tc.args
		if args == nil {
			args = map[string]any{}
		}
		got, err := p.EvalString(map[string]any{"args": args, "call": map[string]any{"id": "c1", "task": "t1", "tool": "x", "slug": "s"}, "roots": []any{}})
		if (err != nil) != tc.evalErr || got != tc.want {
			t.Errorf("%s: %q, %v; want %q (error %v)", tc.src, got, err, tc.want, tc.evalErr)
		}
	}
}
