// The normalization layers' factories.
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {

void AddNormalizationLayers(LayerFactories* f) { (void)f; }

}  // namespace lockstep::trainer::keras
