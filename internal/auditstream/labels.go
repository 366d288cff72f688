package auditstream

// LabelsReset is an operator's reset of a task's information-flow labels
// (airlock tasks reset-labels): done, with the labels it cleared, or
// refused with the reason. The reason is written (bounded): it is the
// operator's own words, not a call's arguments, and a reset without it
// would be a label lowered without a why.
type LabelsReset struct {
	Task, By, Reason string
	// Before are the cleared labels, as api.Labels.String prints them.
	Before  string
	Refused string
}

// LabelsReset writes a labels_reset line.
func (a *Log) LabelsReset(r LabelsReset) {
	e := a.event(EventLabelsReset).Str("task", r.Task).Str("by", r.By).Str("reason", truncate(r.Reason))
	if r.Before != "" {
		e = e.Str("before", r.Before)
	}
	if r.Refused != "" {
		e = e.Str("refused", truncate(r.Refused))
	}
	e.Send()
}
