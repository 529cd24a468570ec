package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

// certificate serves the pair in server.tls_cert_file and
// server.tls_key_file. Handshakes read the pair through a pointer that a
// reload swaps, so a renewed certificate is served without a restart and
// without dropping a connection.
type certificate struct {
	certFile, keyFile string
	pair              atomic.Pointer[tls.Certificate]
}

// loadCertificate reads the pair, refusing files that cannot be read,
// do not parse or do not belong together.
func loadCertificate(certFile, keyFile string) (*tls.Certificate, error) {
	for key, f := range map[string]string{"server.tls_cert_file": certFile, "server.tls_key_file": keyFile} {
		if _, err := os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("%s %s cannot be read: %w: check the path and that the server's user may read it", key, f, err)
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("server.tls_cert_file %s and server.tls_key_file %s are not a matching PEM certificate and private key: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("server.tls_cert_file %s: %w", certFile, err)
		}
	}
	return &pair, nil
}

func newCertificate(certFile, keyFile string) (*certificate, error) {
	pair, err := loadCertificate(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	c := &certificate{certFile: certFile, keyFile: keyFile}
	c.pair.Store(pair)
	return c, nil
}

// get is the tls.Config's GetCertificate.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.pair.Load(), nil
}

// reload reads the files again; on an error the pair in service stays.
func (c *certificate) reload() error {
	pair, err := loadCertificate(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.pair.Store(pair)
	return nil
}

// tlsConfig is what the listener serves with: TLS 1.2 at least (Go's
// defaults choose the cipher suites, all with forward secrecy and AEAD,
// and prefer TLS 1.3), and the pair read through c.
func (c *certificate) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

// ErrNoTLS is ReloadTLS's answer when the server serves plain HTTP.
var ErrNoTLS = errors.New("server.tls_cert_file is not set: there is no certificate to reload")

// ReloadTLS reads server.tls_cert_file and server.tls_key_file again and
// serves the new pair from the next handshake on. A file that cannot be
// read or a pair that does not match is an error, and the pair in service
// stays. Run calls it on SIGHUP.
func (s *Server) ReloadTLS() error {
	if s.cert == nil {
		return ErrNoTLS
	}
	if err := s.cert.reload(); err != nil {
		s.log.Error("reloading the TLS certificate failed: the previous one is still served; fix the files and send SIGHUP again", "error", err)
		return err
	}
	s.log.Info("TLS certificate reloaded", "cert_file", s.cert.certFile, "not_after", s.cert.pair.Load().Leaf.NotAfter)
	return nil
}

// reloadOnHangup calls ReloadTLS on every SIGHUP until stop is called. It
// is set up in New, before the server answers, so a SIGHUP sent once it
// does never meets the default action, which ends the process.
func (s *Server) reloadOnHangup() (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				// ReloadTLS logs the outcome.
				_ = s.ReloadTLS()
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// scheme is how the banner names the listener's URLs.
func (s *Server) scheme() string {
	if s.cert != nil {
		return "https"
	}
	return "http"
}
