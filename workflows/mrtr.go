package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/airlock-run/airlock/api"
)

// maxInputs bounds the answers a run keeps: an activity reads its answer
// within a second of its arrival, so only the latest few matter.
const maxInputs = 32

// listenInputs keeps the answers api.SignalCallInput brings, for the
// activities that wait for them (api.QueryCallInput). They are sealed to
// each activity's one-time key: the task holds them without being able to
// read them.
func (t *task) listenInputs(ctx workflow.Context) error {
	t.mrtrOn = true
	ch := workflow.GetSignalChannel(ctx, api.SignalCallInput)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var in api.CallInput
			if !ch.Receive(ctx, &in) {
				return
			}
			if in.CallID == "" || in.AskID == "" {
				continue
			}
			t.inputs = append(t.inputs, in)
			if n := len(t.inputs); n > maxInputs {
				t.inputs = append([]api.CallInput(nil), t.inputs[n-maxInputs:]...)
			}
		}
	})
	return workflow.SetQueryHandler(ctx, api.QueryCallInput, func(callID, askID string) (api.CallInput, error) {
		for _, in := range t.inputs {
			if in.CallID == callID && in.AskID == askID {
				return in, nil
			}
		}
		return api.CallInput{}, nil
	})
}
