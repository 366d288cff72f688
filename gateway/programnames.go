package gateway

import "github.com/airlock-run/airlock/api"

// The names of a program's tools are api's (api/programnames.go), shared
// with a plan's program steps.

// ProgramDefaultModule is the module of tools whose exposed name has no
// "__" (no server prefix).
const ProgramDefaultModule = api.ProgramDefaultModule

func programName(exposed string) (module, function string) { return api.ProgramName(exposed) }

func programTools(tools []api.ProgramTool) []api.ProgramTool { return api.NameProgramTools(tools) }
