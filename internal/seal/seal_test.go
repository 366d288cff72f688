package seal

import (
	"bytes"
	"errors"
	"testing"
)

func TestSealOpen(t *testing.T) {
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte(`{"action":"accept","content":{"password":"hunter2"}}`)
	peer, sealed, err := Seal(key.PublicKey().Bytes(), msg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("hunter2")) {
		t.Fatal("the sealed message holds the plaintext")
	}
	got, err := Open(key, peer, sealed)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("Open = %q, %v; want the message", got, err)
	}

	other, _ := NewKey()
	if _, err := Open(other, peer, sealed); !errors.Is(err, ErrOpen) {
		t.Errorf("opened with another key: err %v, want ErrOpen", err)
	}
	altered := append([]byte{}, sealed...)
	altered[0] ^= 1
	if _, err := Open(key, peer, altered); !errors.Is(err, ErrOpen) {
		t.Errorf("opened an altered message: err %v, want ErrOpen", err)
	}
	if _, _, err := Seal([]byte("short"), msg); err == nil {
		t.Error("sealed to a malformed key")
	}
}
