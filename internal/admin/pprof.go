package admin

import (
	"net/http"
	"net/http/pprof"

	"github.com/labstack/echo/v4"
)

// registerPprof serves Go's runtime profiles under /debug/pprof/ behind the
// admin token, so an operator can profile a live replica:
//
//	curl -H "Authorization: Bearer $RELAY_ADMIN_TOKEN" -o cpu.pprof 'http://relay-admin:8081/debug/pprof/profile?seconds=30'
//	go tool pprof -http : cpu.pprof
//
// The handlers come from net/http/pprof; mounting them on echo (not on
// http.DefaultServeMux, which nothing serves) keeps them behind requireToken.
// A CPU profile holds its request for the seconds asked; the admin listener
// has no write timeout, so nothing cuts it short.
func (s *Server) registerPprof() {
	e := s.echo
	e.GET("/debug/pprof/", echo.WrapHandler(http.HandlerFunc(pprof.Index)))
	// Index serves the named profiles (heap, goroutine, allocs, block,
	// mutex, threadcreate) from the path's last element.
	e.GET("/debug/pprof/:name", echo.WrapHandler(http.HandlerFunc(pprof.Index)))
	e.GET("/debug/pprof/cmdline", echo.WrapHandler(http.HandlerFunc(pprof.Cmdline)))
	e.GET("/debug/pprof/profile", echo.WrapHandler(http.HandlerFunc(pprof.Profile)))
	e.GET("/debug/pprof/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)))
	e.POST("/debug/pprof/symbol", echo.WrapHandler(http.HandlerFunc(pprof.Symbol)))
	e.GET("/debug/pprof/trace", echo.WrapHandler(http.HandlerFunc(pprof.Trace)))
}
