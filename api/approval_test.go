package api

import "testing"

func TestVoteCounts(t *testing.T) {
	cases := []struct {
		name          string
		votes         []bool // Approve of each vote, in order
		approve, deny int
	}{
		{"none", nil, 0, 0},
		{"approvals", []bool{true, true}, 2, 0},
		{"a deny after an approval", []bool{true, false}, 1, 1},
		{"a deny", []bool{false}, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r ApprovalRequest
			var n ApprovalNotice
			for i, a := range c.votes {
				name := string(rune('a' + i))
				r.Votes = append(r.Votes, Vote{Approver: name, Approve: a})
				n.Votes = append(n.Votes, NoticeVote{Approver: name, Approve: a})
			}
			if got, got2 := r.Approvals(), r.Denials(); got != c.approve || got2 != c.deny {
				t.Errorf("request: %d approvals, %d denials; want %d, %d", got, got2, c.approve, c.deny)
			}
			if got, got2 := n.Approvals(), n.Denials(); got != c.approve || got2 != c.deny {
				t.Errorf("notice: %d approvals, %d denials; want %d, %d", got, got2, c.approve, c.deny)
			}
		})
	}
}
