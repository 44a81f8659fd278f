package httpserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// certCheckEvery is how often a handshake looks at the certificate files.
const certCheckEvery = time.Second

// CertReloader serves a certificate and key from files and picks up new
// files without a restart: at most once a second a handshake compares the
// files' size, modification time and inode (a renamed-in or re-linked file
// counts, as cert-manager and Kubernetes secrets replace them) and loads the
// pair again when they changed. A pair that does not load (e.g. the
// certificate was replaced and the key not yet) is logged and the previous
// one stays in service until a later check loads the new pair.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	every             time.Duration

	mu        sync.Mutex
	cert      *tls.Certificate
	stamp     [2]fileStamp
	checked   time.Time
	lastError [2]fileStamp // stamps whose load failed, so each is logged once
}

type fileStamp struct {
	size  int64
	mtime time.Time
	inode uint64
}

// LoadCert loads the pair once (an error here is a configuration error) and
// returns a reloader for it.
func LoadCert(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log, every: certCheckEvery}
	stamp, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

// Config is a server TLS configuration: TLS 1.2 and later, HTTP/1.1, the
// certificate from this reloader.
func (r *CertReloader) Config() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
		GetCertificate: r.GetCertificate,
	}
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= r.every {
		r.checked = time.Now()
		r.reloadLocked()
	}
	return r.cert, nil
}

func (r *CertReloader) reloadLocked() {
	stamp, err := r.stamps()
	if err != nil {
		if stamp != r.lastError {
			r.lastError = stamp
			r.log.Warn("TLS certificate files unreadable; still serving the previous certificate", slog.Any("err", err))
		}
		return
	}
	if stamp == r.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if stamp != r.lastError {
			r.lastError = stamp
			r.log.Warn("TLS certificate files changed but do not load; still serving the previous certificate",
				slog.String("cert", r.certFile), slog.String("key", r.keyFile), slog.Any("err", err))
		}
		return
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("TLS certificate reloaded", slog.String("cert", r.certFile))
}

func (r *CertReloader) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return out, fmt.Errorf("TLS file: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return out, errors.New("TLS file " + f + " is not a regular file")
		}
		out[i] = fileStamp{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[i].inode = st.Ino
		}
	}
	return out, nil
}
