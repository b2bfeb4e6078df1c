#include "ui/views/registry.h"

#include "ui/views/attention_view.h"
#include "ui/views/attribution_view.h"
#include "ui/views/circuits_view.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/contributions_view.h"
#include "ui/views/graph_view.h"
#include "ui/views/head_dataset_view.h"
#include "ui/views/logit_lens_view.h"
#include "ui/views/patching_view.h"
#include "ui/views/units_view.h"

namespace hs::ui {

const std::vector<ViewDescriptor>& viewRegistry() {
  static const std::vector<ViewDescriptor> views = {
      AttentionView::descriptor(),
      ContributionsView::descriptor(),
      ConcatSumView::descriptor(),
      LogitLensView::descriptor(),
      CircuitsView::descriptor(),
      PatchingView::descriptor(),
      AttributionView::descriptor(),
      HeadDatasetView::descriptor(),
      UnitsView::neuronsDescriptor(),
      UnitsView::featuresDescriptor(),
      GraphView::descriptor(),
  };
  return views;
}

const ViewDescriptor* findView(const QString& id) {
  for (const ViewDescriptor& v : viewRegistry())
    if (v.id == id) return &v;
  return nullptr;
}

}  // namespace hs::ui
