package identity

// Replace makes d answer from n from now on: principals, their keys and
// roles of a reloaded configuration (package reload). Everything holding d
// (the gateway, the approval page, Slack, the HTTP limits) sees the new
// principals at its next request, without being rebuilt. Sessions bound to
// a principal stay bound to its name; a principal that was removed is
// refused at its next request. The OAuth metadata mounted by MountMetadata
// is the one of the first configuration (changing principals_from_tokens's
// issuer or resource needs a restart).
func (d *Directory) Replace(n *Directory) {
	if n == nil || n == d {
		return
	}
	if nn := n.next.Load(); nn != nil {
		n = nn
	}
	d.next.Store(n)
}

// now is the directory to answer from: the last one Replace gave, else d.
func (d *Directory) now() *Directory {
	if n := d.next.Load(); n != nil {
		return n
	}
	return d
}
