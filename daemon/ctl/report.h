#pragma once
// trialctl report: one self-contained HTML file for a study. The page is the template in
// daemon/ctl/report_template.html (embedded at build time) with the study's export data
// inlined as JSON; a small inline script draws every plot as SVG when the page loads, so the
// file works offline and fetches nothing (no external script, style sheet or font).
//
// Plots: optimisation history (one point per finished trial, data-trial=N; COMPLETE values,
// PRUNED at their last intermediate value, FAIL trials in a band below the axis; the best-so-far
// line), learning curves (intermediate values per trial, pruned trials marked), a slice plot
// per parameter, parallel coordinates, the resources triald measured (peak memory, peak GPU
// memory and CPU time per trial, class res-mem-point, res-gpu-point, res-cpu-point; objective 0
// against peak memory, res-scatter-point), and a table of trials sortable by any column.
//
// Thread-safety: pure functions.

#include <string>

#include "common/status.h"
#include "daemon/export/study_export.h"

namespace triald::ctl {

// The page's HTML.
std::string RenderReport(const exports::StudyData& study);
// RenderReport written to `path` (replaced atomically if it exists); errors name the path.
common::Status WriteReport(const exports::StudyData& study, const std::string& path);

}  // namespace triald::ctl
