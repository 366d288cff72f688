package devserver

import (
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	srvlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
	"go.uber.org/zap/zapcore"
)

// serverLogger adapts the Temporal server's tag-based logger interface to
// zerolog. Records below min are dropped before any tag is encoded, which
// matters because the server logs a lot at info and debug.
type serverLogger struct {
	zl zerolog.Logger
	// min is shared with every logger derived through With, so Server.Stop
	// can quieten them all at once.
	min  *atomic.Int32
	tags []tag.Tag // from With, prepended to every record
}

var (
	_ srvlog.Logger     = (*serverLogger)(nil)
	_ srvlog.WithLogger = (*serverLogger)(nil)
)

func newServerLogger(zl zerolog.Logger, min zerolog.Level) *serverLogger {
	l := &serverLogger{zl: zl, min: new(atomic.Int32)}
	l.setLevel(min)
	return l
}

// setLevel changes the minimum level of l and of every logger derived from
// it; zerolog.Disabled drops everything.
func (l *serverLogger) setLevel(min zerolog.Level) { l.min.Store(int32(min)) }

func (l *serverLogger) level() zerolog.Level { return zerolog.Level(l.min.Load()) }

func (l *serverLogger) Debug(msg string, tags ...tag.Tag) { l.log(zerolog.DebugLevel, msg, tags) }
func (l *serverLogger) Info(msg string, tags ...tag.Tag)  { l.log(zerolog.InfoLevel, msg, tags) }
func (l *serverLogger) Warn(msg string, tags ...tag.Tag)  { l.log(zerolog.WarnLevel, msg, tags) }
func (l *serverLogger) Error(msg string, tags ...tag.Tag) { l.log(zerolog.ErrorLevel, msg, tags) }

// DPanic panics only in zap's development mode; the server runs in
// production mode, where it is an error log.
func (l *serverLogger) DPanic(msg string, tags ...tag.Tag) { l.log(zerolog.ErrorLevel, msg, tags) }

// Panic and Fatal must not return: the server calls them where continuing
// would dereference nil (a failed listener, an uninitialised shard range), so
// the interface's contract is kept rather than turned into a log line.
func (l *serverLogger) Panic(msg string, tags ...tag.Tag) {
	l.log(zerolog.PanicLevel, msg, tags)
	panic("temporal server: " + msg)
}

func (l *serverLogger) Fatal(msg string, tags ...tag.Tag) {
	l.log(zerolog.FatalLevel, msg, tags)
	os.Exit(1)
}

func (l *serverLogger) With(tags ...tag.Tag) srvlog.Logger {
	return &serverLogger{zl: l.zl, min: l.min, tags: append(slices.Clip(l.tags), tags...)}
}

func (l *serverLogger) log(lvl zerolog.Level, msg string, tags []tag.Tag) {
	if lvl < l.level() {
		return
	}
	// WithLevel, unlike zl.Panic/zl.Fatal, only logs; the caller decides
	// whether to stop.
	e := l.zl.WithLevel(lvl)
	if e == nil {
		return
	}
	for _, t := range l.tags {
		addTag(e, t)
	}
	for _, t := range tags {
		addTag(e, t)
	}
	e.Msg(msg)
}

func addTag(e *zerolog.Event, t tag.Tag) {
	zt, ok := t.(tag.ZapTag)
	if !ok {
		addValue(e, t.Key(), t.Value())
		return
	}
	// ZapTag.Value picks one entry of a map at random, and an error tag can
	// write two (error, errorVerbose), so encode the field ourselves and keep
	// every entry it produces.
	enc := zapcore.NewMapObjectEncoder()
	zt.Field().AddTo(enc)
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		addValue(e, k, enc.Fields[k])
	}
}

func addValue(e *zerolog.Event, key string, v any) {
	switch v := v.(type) {
	case nil:
		e.Interface(key, nil)
	case string:
		e.Str(key, v)
	case []string:
		e.Strs(key, v)
	case bool:
		e.Bool(key, v)
	case int:
		e.Int(key, v)
	case int32:
		e.Int32(key, v)
	case int64:
		e.Int64(key, v)
	case uint32:
		e.Uint32(key, v)
	case uint64:
		e.Uint64(key, v)
	case float64:
		e.Float64(key, v)
	case time.Duration:
		e.Dur(key, v)
	case time.Time:
		e.Time(key, v)
	case error:
		e.AnErr(key, v)
	case fmt.Stringer:
		e.Stringer(key, v)
	default:
		e.Interface(key, v)
	}
}
