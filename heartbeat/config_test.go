package heartbeat_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/responder"
)

// TestZeroConfigTakesDocumentedDefaults: a zero Config heartbeats every
// second with half-second requests, waits 10 s for a claim's or a
// transition's commit, declares a member dead after 3 misses,
// gives a new leader 3 s of grace, warns past a 500 ms round, reports
// DefaultVersion and reaches members over plain HTTP at Path.
func TestZeroConfigTakesDocumentedDefaults(t *testing.T) {
	c := heartbeat.Config{}.WithDefaults()
	require.Equal(t, time.Second, c.Interval)
	require.Equal(t, 500*time.Millisecond, c.Timeout, "Interval/2")
	require.Equal(t, 10*time.Second, c.ProposeTimeout, "10 × Interval")
	require.Equal(t, 3, c.DeadAfter)
	require.Equal(t, 3*time.Second, c.Grace, "DeadAfter × Interval")
	require.Equal(t, 500*time.Millisecond, c.SlowRound, "Timeout")
	require.Equal(t, responder.DefaultVersion(), c.Version)
	require.NotNil(t, c.Clock)
	require.NotNil(t, c.Logger)
	require.NotNil(t, c.Client)
	require.Zero(t, c.Client.Timeout, "no overall timeout: each request has Timeout")
	require.Equal(t, "http://10.0.0.1:7000"+responder.Path, c.Endpoint(heartbeat.Member{Addr: "10.0.0.1:7000"}))
	require.Zero(t, c.ID)
	require.Nil(t, c.Tree)
	require.Nil(t, c.Journal)
}

// TestWithDefaultsDerivesFromSetValues: defaults that follow other fields
// follow the values set, and TLS makes the default endpoint https.
func TestWithDefaultsDerivesFromSetValues(t *testing.T) {
	c := heartbeat.Config{Interval: 4 * time.Second, DeadAfter: 5, TLS: &tls.Config{}}.WithDefaults()
	require.Equal(t, 2*time.Second, c.Timeout)
	require.Equal(t, 20*time.Second, c.Grace)
	require.Equal(t, 40*time.Second, c.ProposeTimeout)
	require.Equal(t, 2*time.Second, c.SlowRound)
	require.Equal(t, "https://m:1"+responder.Path, c.Endpoint(heartbeat.Member{Addr: "m:1"}))
}
