// Package clock is the time source the journal, image and heartbeat
// packages share: an interface modelled on tailscale's tstime.Clock and the
// real clock behind it. Each package exposes the interface as its own
// Clock type (an alias), so that a Config field names it and tests inject a
// clock they advance by hand; under testing/synctest the real clock is
// already deterministic.
package clock
