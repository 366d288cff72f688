package api

import (
	"reflect"
	"testing"
	"time"
)

// limitsWith sets every field of ProgramLimits to v(i), i its index, so a
// field added later is covered without this test naming it.
func limitsWith(t *testing.T, v func(i int) int64) ProgramLimits {
	t.Helper()
	var l ProgramLimits
	rv := reflect.ValueOf(&l).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(v(i))
		default:
			t.Fatalf("ProgramLimits.%s is a %s; teach Or and this test about it", rv.Type().Field(i).Name, f.Kind())
		}
	}
	return l
}

func TestProgramLimitsOr(t *testing.T) {
	d := limitsWith(t, func(i int) int64 { return int64(1000 + i) })
	set := limitsWith(t, func(i int) int64 { return int64(1 + i) })
	if got := set.Or(d); got != set {
		t.Errorf("every field set: got %+v, want %+v", got, set)
	}
	if got := (ProgramLimits{}).Or(d); got != d {
		t.Errorf("every field zero: got %+v, want the defaults %+v", got, d)
	}
	negative := limitsWith(t, func(i int) int64 { return -1 - int64(i) })
	if got := negative.Or(d); got != d {
		t.Errorf("every field negative: got %+v, want the defaults %+v", got, d)
	}
	// The most negative values are no bigger a limit than -1.
	if got := (ProgramLimits{MaxSteps: -1 << 63, Timeout: time.Duration(-1 << 63)}).Or(d); got != d {
		t.Errorf("minimum int64: got %+v", got)
	}
	// Field by field: one set, the rest default.
	got := ProgramLimits{MaxCalls: 3, Timeout: time.Minute}.Or(DefaultProgramLimits)
	want := DefaultProgramLimits
	want.MaxCalls, want.Timeout = 3, time.Minute
	if got != want {
		t.Errorf("two fields set: got %+v, want %+v", got, want)
	}
}
