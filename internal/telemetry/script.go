package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScriptObserver is called by the store around each Lua script it runs. op is
// the script's name (a closed set, e.g. "claim"); the returned context
// carries the script's span, and end must be called once with the script's
// transport or script error (nil for any reply, including refusals).
type ScriptObserver func(ctx context.Context, op string) (context.Context, func(err error))

// ScriptObserver returns the observer that gives every store script a child
// span and records its latency and errors.
func (t *Telemetry) ScriptObserver() ScriptObserver {
	return func(ctx context.Context, op string) (context.Context, func(error)) {
		start := time.Now()
		if !t.tracing {
			// A no-op span would only repeat the parent's context.
			return ctx, func(err error) { t.metrics.recordScript(ctx, op, time.Since(start), err) }
		}
		ctx, span := t.tracer.Start(ctx, "valkey "+op,
			trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String("db.system.name", "valkey"),
				attribute.String("db.operation.name", t.scriptCommand()),
				attribute.String("relay.script", op),
			))
		return ctx, func(err error) {
			t.metrics.recordScript(ctx, op, time.Since(start), err)
			if err != nil {
				// The error text comes from the Valkey client or a script's
				// error_reply; neither carries keys or payload bytes.
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}

func withSet(s attribute.Set) metric.AddOption { return metric.WithAttributeSet(s) }

// SetScriptCommand names the command store operations are sent with
// ("FCALL" or "EVALSHA", store.ScriptCommand), for the spans' operation
// name; "EVALSHA" until it is called.
func (t *Telemetry) SetScriptCommand(cmd string) { t.scriptCmd.Store(cmd) }

func (t *Telemetry) scriptCommand() string {
	if cmd, ok := t.scriptCmd.Load().(string); ok {
		return cmd
	}
	return "EVALSHA"
}
