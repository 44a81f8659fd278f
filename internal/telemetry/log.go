package telemetry

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// TraceHandler wraps a slog.Handler so every record logged with a context
// that carries a span gets trace_id and span_id attributes.
type TraceHandler struct {
	inner slog.Handler
}

// NewTraceHandler wraps inner.
func NewTraceHandler(inner slog.Handler) *TraceHandler { return &TraceHandler{inner: inner} }

// Enabled reports whether inner handles level.
func (h *TraceHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.inner.Enabled(ctx, level)
}

// Handle adds the trace ids, then hands the record on.
func (h *TraceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.inner.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the derived handler.
func (h *TraceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &TraceHandler{inner: h.inner.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the derived handler.
func (h *TraceHandler) WithGroup(name string) slog.Handler {
	return &TraceHandler{inner: h.inner.WithGroup(name)}
}

// NewLogger builds the relay's logger: JSON (production) or text lines on w
// at level, with trace ids.
func NewLogger(w io.Writer, jsonFormat bool, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationText}
	var h slog.Handler
	if jsonFormat {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(NewTraceHandler(h))
}

// durationText writes a duration as Go writes it ("500ms"), where the JSON
// handler would write nanoseconds (500000000) that nobody reads at a glance.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
