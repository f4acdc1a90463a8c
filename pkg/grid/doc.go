// Package grid holds omst's membership material as plain code: the grid
// key, membership certificates, join tokens and revocation lists, their
// binary forms (every decoder bounded and fuzzed), and the rights a
// certificate gives (MayWrite). No IO, no clocks: callers pass the time.
//
// The grid key is an ed25519 key kept by the grid's root. It signs:
//   - a Cert: a peer ID may be a member, with a Role and the name prefixes
//     it may write, from NotBefore to NotAfter, under a Serial;
//   - a Token: whoever redeems it (once, before it expires) with the root
//     gets a Cert of its role and prefixes, valid for CertTTL;
//   - a Revocations list: the serials no longer valid, with a sequence
//     number (a node keeps the highest it has seen).
//
// Every signature is over a domain string naming the kind and version,
// then the encoded fields, so that no signed object can pass for another.
package grid
