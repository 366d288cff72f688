// Package redact keeps secrets and hidden characters out of what people
// and logs are shown of a tool call's arguments.
//
// What lives here:
//
//   - masking: the value at each of a manifest's redact paths ("auth.token";
//     a path through a list applies to every element) replaced by Mask
//     (MaskArguments, Indent, PrettyArguments), and the same values masked
//     where they show again outside the arguments, in results and errors
//     (ValuesAt, MaskValues, MaskJSON);
//   - scrubbing: _meta and credential-named members removed at any depth
//     (Scrub, SecretName, Arguments), a defence against a caller who puts a
//     credential in a tool's arguments;
//   - diffing: what an approver's edit changed, secrets masked and a change
//     the mask hides named by its path (Changes, ChangeText);
//   - terminal escaping: control and invisible formatting characters shown
//     as \uXXXX (Visible, VisibleLine), so text from agents and tools cannot
//     rewrite a terminal or hide part of itself.
//
// The approver (Slack, web page, CLI), the workflows (an edit's diff), the
// audit timeline and the CLI use it. It is a leaf: it imports only the standard library and nothing of
// airlock.
package redact
