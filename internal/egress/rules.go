// Package egress is the egress allowlist of a sandboxed stdio server
// (issue 32): the rules a manifest writes (server.sandbox.network.allow,
// "host:port" entries), and a forward proxy that enforces them from
// outside the server's network namespace. The server reaches the proxy
// only through a unix socket bound into its sandbox (internal/bwrap runs
// the forwarder inside); the proxy resolves names itself, dials only the
// addresses it checked, and reports every refusal to its caller.
//
// It imports the standard library only; manifests uses ParseRule to
// validate entries, internal/upstream runs a Proxy per sandboxed server.
package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one allowlist entry: a host name, a wildcard over a domain's
// subdomains ("*.example.com": a.example.com and a.b.example.com, not
// example.com itself), or an IP literal; and one port.
type Rule struct {
	// Name is the host name, lower case without a trailing dot; for a
	// wildcard the domain after "*."; empty for an IP literal.
	Name     string
	Wildcard bool
	// IP is the address of an IP literal (IPv4-mapped IPv6 unmapped).
	IP   netip.Addr
	Port uint16
}

// String is the rule's canonical form, which ParseRule reads back; two
// entries with the same canonical form are duplicates.
func (r Rule) String() string {
	port := strconv.Itoa(int(r.Port))
	switch {
	case r.IP.IsValid():
		return netip.AddrPortFrom(r.IP, r.Port).String()
	case r.Wildcard:
		return "*." + r.Name + ":" + port
	}
	return r.Name + ":" + port
}

// Limits on what an entry may be.
const (
	maxEntry = 300 // a name is at most 253 characters, plus ":65535"
	maxName  = 253
	maxLabel = 63
)

// ParseRule reads one allowlist entry, "host:port", "*.domain:port",
// "1.2.3.4:port" or "[2001:db8::1]:port". Its errors quote the entry and
// say how to write it.
func ParseRule(s string) (Rule, error) {
	if strings.TrimSpace(s) == "" {
		return Rule{}, fmt.Errorf(`is empty; write host:port, e.g. "api.github.com:443"`)
	}
	if len(s) > maxEntry {
		return Rule{}, fmt.Errorf("is %d characters long; an entry is a host name (at most %d) and a port", len(s), maxName)
	}
	if strings.TrimSpace(s) != s {
		return Rule{}, fmt.Errorf("%q has spaces around it; remove them", s)
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		host, _, _ := strings.Cut(rest, "/")
		return Rule{}, fmt.Errorf("%q has a scheme (%s://); write host:port only, e.g. %q", s, scheme, withPort(host, scheme))
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		return Rule{}, fmt.Errorf("%q has a path or query (%q); the allowlist names hosts and ports, not URLs: write %q", s, s[i:], s[:i])
	}
	if strings.Contains(s, "@") {
		return Rule{}, fmt.Errorf("%q has a user name (@); write host:port only", s)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if _, perr := netip.ParseAddr(s); perr == nil && strings.Contains(s, ":") {
			return Rule{}, fmt.Errorf("%q is an IPv6 address without a port; write it in brackets with one, e.g. \"[%s]:443\"", s, s)
		}
		if !strings.Contains(s, ":") {
			return Rule{}, fmt.Errorf("%q has no port; write one, e.g. %q", s, s+":443")
		}
		return Rule{}, fmt.Errorf("%q is not host:port (%s)", s, strings.TrimPrefix(err.Error(), "address "+s+": "))
	}
	p, err := parsePort(port)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	r := Rule{Port: p}
	if strings.HasPrefix(s, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return Rule{}, fmt.Errorf("%q: only an IPv6 address goes in brackets", s)
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Rule{}, fmt.Errorf("%q has an IPv6 zone (%%%s); write the address without it", s, a.Zone())
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
			return Rule{}, fmt.Errorf("%q is not a host's address (unspecified, multicast or broadcast); name the host", s)
		}
		r.IP = a
		return r, nil
	}
	name := host
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard = true
		name = rest
	}
	switch {
	case name == "*" || host == "*" || name == "":
		return Rule{}, fmt.Errorf("%q matches every host; list the hosts the server needs, or write network: host if every host is meant", s)
	case strings.Contains(name, "*"):
		return Rule{}, fmt.Errorf("%q has a * inside; only a leading \"*.\" is a wildcard (\"*.example.com:443\" allows the subdomains of example.com)", s)
	}
	name, err = normalName(name)
	if err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	if r.Wildcard && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("%q covers a whole top-level domain; name the domain, e.g. \"*.example.%s:%d\"", s, name, p)
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return Rule{}, fmt.Errorf("%q resolves to loopback, which the proxy refuses for names; write the address literally, e.g. \"127.0.0.1:%d\"", s, p)
	}
	r.Name = name
	return r, nil
}

// withPort suggests host:port for a URL's host and scheme.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil || host == "" {
		return host
	}
	if strings.EqualFold(scheme, "http") {
		return host + ":80"
	}
	return host + ":443"
}

// parsePort reads a port: decimal digits, 1 to 65535.
func parsePort(s string) (uint16, error) {
	if s == "" {
		return 0, fmt.Errorf("the port is empty; write one, e.g. 443")
	}
	if s == "*" {
		return 0, fmt.Errorf("the port is *; name one port per entry (every port of a host is rarely meant)")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("port %q is not a number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("port %s is out of range (1 to 65535)", s)
	}
	return uint16(n), nil
}

// normalName checks a DNS host name and returns it in lower case without
// a trailing dot.
func normalName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", fmt.Errorf("the host name is empty")
	}
	if len(name) > maxName {
		return "", fmt.Errorf("the host name is %d characters long; DNS allows %d", len(name), maxName)
	}
	for _, c := range name {
		if c >= 0x80 {
			return "", fmt.Errorf("the host name is not ASCII; write its punycode form (xn--…)")
		}
	}
	name = strings.ToLower(name)
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "", fmt.Errorf("the host name has an empty label (..)")
		case len(l) > maxLabel:
			return "", fmt.Errorf("the label %.20q… is %d characters long; DNS allows %d", l, len(l), maxLabel)
		case l[0] == '-' || l[len(l)-1] == '-':
			return "", fmt.Errorf("the label %q starts or ends with a hyphen", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("the host name has %q, which is not a letter, digit or hyphen", c)
			}
		}
	}
	// "10.1", "0x7f.1" or "1.2.3.4.5" are not names a resolver treats as
	// names (or treats differently from one to the next).
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", fmt.Errorf("the host is neither an IP address nor a host name (its last label is numeric); write the address as four decimal numbers, or the name")
	}
	return name, nil
}

// Allowlist is a server's parsed rules.
type Allowlist []Rule

// ParseAllowlist parses every entry; the first error names its index.
// Validation (manifests) reports every entry; this is for callers that
// have a validated manifest.
func ParseAllowlist(entries []string) (Allowlist, error) {
	var out Allowlist
	for i, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, fmt.Errorf("allow[%d]: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// names returns whether host:port is allowed by a name rule, and whether
// the host is allowed on some other port (for the refusal's reason).
func (l Allowlist) names(host string, port uint16) (allowed bool, otherPorts []uint16) {
	for _, r := range l {
		if r.IP.IsValid() {
			continue
		}
		match := r.Name == host
		if r.Wildcard {
			match = strings.HasSuffix(host, "."+r.Name)
		}
		if !match {
			continue
		}
		if r.Port == port {
			return true, nil
		}
		otherPorts = append(otherPorts, r.Port)
	}
	return false, otherPorts
}

// literal reports whether an IP rule names a:port.
func (l Allowlist) literal(a netip.Addr, port uint16) (allowed bool, otherPorts []uint16) {
	for _, r := range l {
		if r.IP == a {
			if r.Port == port {
				return true, nil
			}
			otherPorts = append(otherPorts, r.Port)
		}
	}
	return false, otherPorts
}

// special are the addresses a name may not lead to (loopback, private,
// link-local and the cloud metadata address among them): the server
// would reach the host's or the network's own services through the
// proxy. Only an entry naming the address literally reaches one.
var special = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "this network"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private (unique local)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Special says what a is when a name may not lead there ("loopback",
// "the cloud metadata address", …), or "" for a public address. IPv4
// addresses inside IPv6 (mapped, NAT64, 6to4, compatible) are judged as
// the IPv4 address they carry.
func Special(a netip.Addr) string {
	a = embedded(a)
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.what
		}
	}
	return ""
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour = netip.MustParsePrefix("2002::/16")
	compat    = netip.MustParsePrefix("::/96")
)

// embedded is the IPv4 address an IPv6 address carries, or a itself.
func embedded(a netip.Addr) netip.Addr {
	a = a.Unmap()
	if !a.Is6() {
		return a
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), nat64Loc.Contains(a), compat.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return a
}
