package notebook

import (
	"encoding/json"
	"fmt"

	"github.com/airlock-run/airlock/wasm/internal/guest"
)

// Root is where notes.wasm finds its notes: the guest path of its mount.
const Root = "/notes"

// Tools are notes.wasm's tools by their argv[1] name, over the notebook
// at root.
func Tools(root string) map[string]guest.Tool {
	n := New(root)
	return map[string]guest.Tool{
		"write":  n.writeTool,
		"read":   n.readTool,
		"delete": n.deleteTool,
	}
}

// WriteArgs are the arguments of write.
type WriteArgs struct {
	Name    string  `json:"name"`
	Content *string `json:"content"`
}

// NameArgs are the arguments of read and delete.
type NameArgs struct {
	Name string `json:"name"`
}

func (n *Notebook) writeTool(raw json.RawMessage) (guest.Result, error) {
	var a WriteArgs
	if err := guest.Decode(raw, &a); err != nil {
		return guest.Result{}, err
	}
	if a.Content == nil {
		return guest.Result{}, fmt.Errorf("argument content is required: the note's text (\"\" for an empty note)")
	}
	w, err := n.Write(a.Name, *a.Content)
	if err != nil {
		return guest.Result{}, err
	}
	how := "replaced"
	if w.Created {
		how = "created"
	}
	return guest.Result{Text: fmt.Sprintf("note %s %s (%d bytes)", w.Name, how, w.Bytes), Structured: w}, nil
}

// readTool's text is the content itself, what an agent reading a note
// wants to see.
func (n *Notebook) readTool(raw json.RawMessage) (guest.Result, error) {
	var a NameArgs
	if err := guest.Decode(raw, &a); err != nil {
		return guest.Result{}, err
	}
	note, err := n.Read(a.Name)
	if err != nil {
		return guest.Result{}, err
	}
	return guest.Result{Text: note.Content, Structured: note}, nil
}

func (n *Notebook) deleteTool(raw json.RawMessage) (guest.Result, error) {
	var a NameArgs
	if err := guest.Decode(raw, &a); err != nil {
		return guest.Result{}, err
	}
	d, err := n.Delete(a.Name)
	if err != nil {
		return guest.Result{}, err
	}
	text := "note " + d.Name + " deleted"
	if !d.Deleted {
		text = "note " + d.Name + " did not exist; nothing to delete"
	}
	return guest.Result{Text: text, Structured: d}, nil
}
