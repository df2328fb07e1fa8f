// Placeholder: this family's tests land with its layers.
