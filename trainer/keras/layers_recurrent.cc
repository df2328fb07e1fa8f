// The recurrent layers' factories.
#include "trainer/keras/layer_factory.h"

namespace lockstep::trainer::keras {

void AddRecurrentLayers(LayerFactories* f) { (void)f; }

}  // namespace lockstep::trainer::keras
