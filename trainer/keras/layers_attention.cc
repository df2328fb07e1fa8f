// The attention layers' factories.
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {

void AddAttentionLayers(LayerFactories* f) { (void)f; }

}  // namespace lockstep::trainer::keras
