// Package telemetry wires OpenTelemetry into the relay: a tracer provider that
// exports over OTLP/HTTP only when an endpoint is configured, a meter provider
// read by a Prometheus exporter on a private registry (served at /metrics on
// the admin listener), an echo middleware (labelling each request with the
// route its listener decided: recorded with SetRoute by the planes'
// dispatcher, echo's own pattern on the admin listener), a store-script
// observer and a slog handler that stamps trace ids on log lines.
//
// Nothing here ever records a payload, a key, a signature or a caller id:
// labels and span attributes come from small closed sets (route, plane,
// status, caller kind, script name).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every tracer and meter made here.
const ScopeName = "github.com/byollm/relay-go"

// Env names read by EndpointFromEnv. OTEL_* are the SDK's standard names; the
// RELAY_ one lets a deployment point only the relay at a collector.
const (
	EnvRelayOTLPEndpoint  = "RELAY_OTLP_ENDPOINT"
	EnvOTLPEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvOTLPTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvSDKDisabled        = "OTEL_SDK_DISABLED"
)

// Config says how telemetry is set up. The zero value is valid: no trace
// export, metrics on a private registry, service name "byollm-relay".
type Config struct {
	// ServiceName and ServiceVersion become resource attributes
	// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES still override).
	ServiceName    string
	ServiceVersion string

	// OTLPEndpoint is the collector's base URL (for example
	// "http://otel-collector:4318"); "/v1/traces" is appended. Empty means
	// the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variables decide, and
	// if they are unset too, tracing is off (spans are not recorded, but an
	// incoming W3C trace context is still carried into logs).
	OTLPEndpoint string

	// SpanExporter, when set, replaces OTLP export and exports synchronously.
	// Tests use it with tracetest.InMemoryExporter.
	SpanExporter sdktrace.SpanExporter

	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// Telemetry holds the providers and the instruments built on them.
type Telemetry struct {
	tracerProvider trace.TracerProvider
	tracer         trace.Tracer
	meterProvider  *sdkmetric.MeterProvider
	registry       *prometheus.Registry
	propagator     propagation.TextMapPropagator
	metrics        *Metrics
	tracing        bool
	shutdowns      []func(context.Context) error
	scriptCmd      atomic.Value // string: SetScriptCommand
}

// EndpointFromEnv returns the OTLP base endpoint named by RELAY_OTLP_ENDPOINT,
// else "" (the SDK reads the OTEL_ variables itself when Setup enables it).
func EndpointFromEnv(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	return strings.TrimSpace(getenv(EnvRelayOTLPEndpoint))
}

// Setup builds the providers. Call Shutdown on the result when the process
// ends so buffered spans are flushed.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	name := cfg.ServiceName
	if name == "" {
		name = "byollm-relay"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attrs...),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}

	t := &Telemetry{
		// Baggage is accepted so it survives hops, but nothing here reads it.
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}

	// Metrics: a private registry so nothing registered globally by a
	// library leaks onto /metrics, plus the Go runtime and process views.
	t.registry = prometheus.NewRegistry()
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(t.registry),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry prometheus exporter: %w", err)
	}
	t.meterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	t.shutdowns = append(t.shutdowns, t.meterProvider.Shutdown)
	t.metrics, err = NewMetrics(t.meterProvider.Meter(ScopeName))
	if err != nil {
		return nil, err
	}

	// Traces.
	switch {
	case strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true"):
		t.tracerProvider = noop.NewTracerProvider()
	case cfg.SpanExporter != nil:
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(cfg.SpanExporter), sdktrace.WithResource(res))
		t.tracerProvider, t.tracing = tp, true
		t.shutdowns = append(t.shutdowns, tp.Shutdown)
	case cfg.OTLPEndpoint != "" || getenv(EnvOTLPEndpoint) != "" || getenv(EnvOTLPTracesEndpoint) != "":
		var opts []otlptracehttp.Option
		if cfg.OTLPEndpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(cfg.OTLPEndpoint, "/")+"/v1/traces"))
		}
		// The exporter connects lazily, so a collector that is down does not
		// stop the relay from starting; spans are dropped until it is back.
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("telemetry otlp exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tracerProvider, t.tracing = tp, true
		t.shutdowns = append(t.shutdowns, tp.Shutdown)
	default:
		t.tracerProvider = noop.NewTracerProvider()
	}
	t.tracer = t.tracerProvider.Tracer(ScopeName)
	return t, nil
}

// Tracing reports whether spans are recorded and exported.
func (t *Telemetry) Tracing() bool { return t.tracing }

// TracerProvider returns the provider spans come from.
func (t *Telemetry) TracerProvider() trace.TracerProvider { return t.tracerProvider }

// Tracer returns the relay's tracer.
func (t *Telemetry) Tracer() trace.Tracer { return t.tracer }

// MeterProvider returns the provider instruments come from.
func (t *Telemetry) MeterProvider() metric.MeterProvider { return t.meterProvider }

// Propagator is the W3C trace-context (and baggage) propagator used by the
// middleware.
func (t *Telemetry) Propagator() propagation.TextMapPropagator { return t.propagator }

// Metrics returns the relay's instruments.
func (t *Telemetry) Metrics() *Metrics { return t.metrics }

// Registry returns the private Prometheus registry behind MetricsHandler.
func (t *Telemetry) Registry() *prometheus.Registry { return t.registry }

// MetricsHandler serves the registry in the Prometheus exposition format.
// Mount it at /metrics on the admin listener, never on the protocol one.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{
		// A failing observable-gauge callback (say Valkey is down) must not
		// blank the whole scrape: the rest still tells the operator why.
		ErrorHandling: promhttp.ContinueOnError,
		Timeout:       10 * time.Second,
	})
}

// Shutdown flushes and stops the providers, newest first.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdowns) - 1; i >= 0; i-- {
		if err := t.shutdowns[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.shutdowns = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry shutdown: %w", err)
	}
	return nil
}
