// Starts Swagger UI on /docs (a file, so the page's CSP needs no inline script).
// The OpenAPI document's URL is the page's data-openapi-url; the validator badge is
// off: it would send the document to validator.swagger.io.
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    layout: "BaseLayout",
    presets: [window.SwaggerUIBundle.presets.apis],
    showExtensions: true,
    tryItOutEnabled: false,
  });
})();
