// Starts Swagger UI on /docs (blackops/http/api_docs.py): a file, not an inline script, so
// the page's Content-Security-Policy runs nothing but this origin's files.
(function () {
  var node = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: node.getAttribute("data-openapi-url"),
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
