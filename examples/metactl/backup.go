package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"

	"github.com/metatree/metatree/image"
)

// backup downloads the newest image of a running member, verified, into a
// file written atomically, and prints {"index","bytes"}.
func backup(ctx context.Context, args []string, e env) error {
	fl := flag.NewFlagSet("backup", flag.ContinueOnError)
	from := fl.String("from", "", "HOST:PORT of any member (a follower spares the leader)")
	out := fl.String("out", "", "the file to write (replaced atomically)")
	token := fl.String("token", "", "the cluster's token: sent as the join token images require and as an API bearer token")
	cert := fl.String("tls-cert", "", "client certificate (PEM) for a cluster that serves HTTPS")
	key := fl.String("tls-key", "", "the client certificate's key (PEM)")
	ca := fl.String("tls-ca", "", "CA certificate (PEM) that signed the members' certificates")
	if _, err := parse(fl, args, 0, "no positional argument"); err != nil {
		return err
	}
	if *from == "" || *out == "" {
		return usageErr("backup needs -from and -out")
	}
	if (*cert == "") != (*key == "") {
		return usageErr("backup: -tls-cert and -tls-key go together")
	}
	cfg := image.BackupConfig{Addr: *from, Out: *out, FS: e.fs, Token: *token}
	if *token != "" {
		cfg.Header = http.Header{"Authorization": {"Bearer " + *token}}
	}
	if *cert != "" || *ca != "" {
		tc, err := tlsConfig(*cert, *key, *ca)
		if err != nil {
			return err
		}
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: tc, Proxy: http.ProxyFromEnvironment}}
		cfg.Addr = "https://" + *from
	}
	info, err := image.Backup(ctx, cfg)
	if err != nil {
		return err
	}
	return writeJSON(e.stdout, map[string]any{"file": *out, "index": info.Index, "term": info.Term, "cluster_id": info.ClusterID, "bytes": info.Size})
}

// tlsConfig builds the client side of the cluster's mutual TLS.
func tlsConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("backup: load -tls-cert %s and -tls-key %s: %w", certFile, keyFile, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("backup: read -tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("backup: -tls-ca %s holds no PEM certificate", caFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}
