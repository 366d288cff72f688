package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: the canonical form, or "error: <substring>"
	}{
		{"api.github.com:443", "api.github.com:443"},
		{"API.GitHub.COM.:443", "api.github.com:443"},
		{"*.example.com:443", "*.example.com:443"},
		{"*.Example.COM:0443", "*.example.com:443"},
		{"10.0.0.5:8080", "10.0.0.5:8080"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[::ffff:10.0.0.5]:8080", "10.0.0.5:8080"},
		{"xn--bcher-kva.de:443", "xn--bcher-kva.de:443"},
		{"", "error: is empty"},
		{"   ", "error: is empty"},
		{" api.github.com:443", "error: spaces around it"},
		{"*", "error: has no port"},
		{"*:443", "error: matches every host"},
		{"*.:443", "error: matches every host"},
		{"*.com:443", "error: covers a whole top-level domain"},
		{"api.*.com:443", "error: only a leading"},
		{"*api.com:443", "error: only a leading"},
		{"api.github.com", `error: has no port; write one, e.g. "api.github.com:443"`},
		{"api.github.com:", "error: the port is empty"},
		{"api.github.com:*", "error: the port is *"},
		{"api.github.com:0", "error: out of range"},
		{"api.github.com:65536", "error: out of range"},
		{"api.github.com:99999999999999999999", "error: out of range"},
		{"api.github.com:+443", "error: is not a number"},
		{"api.github.com:0x1bb", "error: is not a number"},
		{"https://api.github.com", `error: has a scheme (https://); write host:port only, e.g. "api.github.com:443"`},
		{"http://api.github.com/x", `error: e.g. "api.github.com:80"`},
		{"api.github.com:443/repos", `error: has a path or query ("/repos")`},
		{"api.github.com:443?x=1", "error: has a path or query"},
		{"user@api.github.com:443", "error: has a user name"},
		{"::1", "error: IPv6 address without a port"},
		{"[1.2.3.4]:80", "error: only an IPv6 address goes in brackets"},
		{"[fe80::1%eth0]:443", "error: has an IPv6 zone"},
		{"0.0.0.0:80", "error: is not a host's address"},
		{"[::]:80", "error: is not a host's address"},
		{"224.0.0.1:80", "error: is not a host's address"},
		{"255.255.255.255:80", "error: is not a host's address"},
		{"bücher.de:443", "error: punycode"},
		{"localhost:8080", `error: resolves to loopback, which the proxy refuses for names; write the address literally, e.g. "127.0.0.1:8080"`},
		{"db.localhost:5432", "error: resolves to loopback"},
		{"1.2.3.4.5:80", "error: neither an IP address nor a host name"},
		{"0x7f.1:80", "error: neither an IP address nor a host name"},
		{"10.1:80", "error: neither an IP address nor a host name"},
		{"a..b.com:443", "error: empty label"},
		{"-a.com:443", "error: starts or ends with a hyphen"},
		{"a b.com:443", "error: not a letter"},
		{"a\x00.com:443", "error: not a letter"},
		{strings.Repeat("a", 64) + ".com:443", "error: DNS allows 63"},
		{strings.Repeat("a.", 140) + "com:443", "error: characters long"},
		{strings.Repeat("x", 100000), "error: is 100000 characters long"},
		{"a.com:443:80", "error: is not host:port"},
	} {
		r, err := ParseRule(c.in)
		got := r.String()
		if err != nil {
			got = "error: " + err.Error()
		}
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ParseRule(%.40q) = %s, want an error with %q", c.in, got, want)
			}
			continue
		}
		if got != c.want {
			t.Errorf("ParseRule(%q) = %s, want %s", c.in, got, c.want)
			continue
		}
		// The canonical form reads back to the same rule.
		if back, err := ParseRule(got); err != nil || back != r {
			t.Errorf("ParseRule(%q) (the canonical form of %q) = %v, %v", got, c.in, back, err)
		}
	}
}

func TestSpecial(t *testing.T) {
	for addr, want := range map[string]string{
		"169.254.169.254":        "the cloud metadata address",
		"fd00:ec2::254":          "the cloud metadata address",
		"127.0.0.1":              "loopback",
		"127.9.9.9":              "loopback",
		"::1":                    "loopback",
		"::ffff:127.0.0.1":       "loopback",
		"64:ff9b::7f00:1":        "loopback", // NAT64 of 127.0.0.1
		"2002:7f00:1::1":         "loopback", // 6to4 of 127.0.0.1
		"::a00:5":                "private",  // IPv4-compatible 10.0.0.5
		"10.0.0.5":               "private",
		"172.31.255.255":         "private",
		"192.168.1.1":            "private",
		"100.100.100.200":        "shared (carrier-grade NAT)",
		"169.254.1.1":            "link-local",
		"fe80::1":                "link-local",
		"fc00::1":                "private (unique local)",
		"0.0.0.0":                "this network",
		"::":                     "unspecified",
		"239.1.1.1":              "multicast",
		"8.8.8.8":                "",
		"140.82.112.3":           "",
		"2606:4700:4700::1111":   "",
		"::ffff:140.82.112.3":    "",
		"64:ff9b::8c52:7003":     "",
		"2001:4860:4860::8888":   "",
		"172.32.0.1":             "",
		"192.169.0.1":            "",
		"11.0.0.1":               "",
		"2002:8c52:7003::1":      "",
		"64:ff9b::a9fe:a9fe":     "the cloud metadata address",
		"::ffff:169.254.169.254": "the cloud metadata address",
	} {
		if got := Special(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Special(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestAllowlistMatch(t *testing.T) {
	l, err := ParseAllowlist([]string{"api.github.com:443", "*.example.com:443", "10.0.0.5:8080", "*.example.com:8443"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host  string
		port  uint16
		ok    bool
		other []uint16
	}{
		{"api.github.com", 443, true, nil},
		{"api.github.com", 80, false, []uint16{443}},
		{"github.com", 443, false, nil},
		{"evilapi.github.com", 443, false, nil},
		{"a.example.com", 443, true, nil},
		{"a.b.example.com", 8443, true, nil},
		{"example.com", 443, false, nil},
		{"badexample.com", 443, false, nil},
		{"a.example.com", 22, false, []uint16{443, 8443}},
		{"example.com.evil.net", 443, false, nil},
	} {
		ok, other := l.names(c.host, c.port)
		if ok != c.ok || len(other) != len(c.other) {
			t.Errorf("names(%s, %d) = %v %v, want %v %v", c.host, c.port, ok, other, c.ok, c.other)
		}
	}
	if ok, _ := l.literal(netip.MustParseAddr("10.0.0.5"), 8080); !ok {
		t.Error("10.0.0.5:8080 is not allowed")
	}
	if ok, other := l.literal(netip.MustParseAddr("10.0.0.5"), 80); ok || len(other) != 1 {
		t.Errorf("10.0.0.5:80: %v %v", ok, other)
	}
	if _, err := ParseAllowlist([]string{"a.com:443", "https://b.com"}); err == nil || !strings.HasPrefix(err.Error(), "allow[1]: ") {
		t.Errorf("ParseAllowlist error = %v", err)
	}
}
